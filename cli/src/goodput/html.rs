//! `--html FILE`: the flame of the job as one self-contained page (no file or network fetch), with
//! the sections of NeMo Lens's `goodput_report.py --html`: the summary line (overall goodput and
//! its three factors, GPU-hours, GPUs, the denominator), the sort buttons (fixed, size, alpha),
//! the flame (a click zooms into a box, a second click or `TOTAL` zooms out, hovering names the
//! path and its GPU-hours), and the report rows of the text report (a click zooms there too).
//!
//! Every text from the inputs (span-derived path names, file names in the denominator) reaches
//! the page escaped: the summary as HTML text, the tree as JSON inside a non-executed
//! `<script type="application/json">` with `<`, `>`, `&` and the JavaScript line separators
//! written as `\u` escapes, so no input can close the element or run as script; the page's own
//! script puts names into the document as text only.

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::report::{Factors, JobReport, Node, Sort, sorted, tree};

/// Seconds per GPU-hour.
const H: f64 = 3600.0;

/// The page for `report`, its flame first ordered by `sort`.
pub fn page(report: &JobReport, sort: Sort) -> String {
    let f = Factors::of(&report.paths);
    let summary = format!(
        "OVERALL goodput {:.1}%  =  sched {:.1}% x runtime {:.1}% x app {:.1}%   |   {:.2} gpu-h \
         over {} GPUs   |   {}",
        100.0 * f.overall,
        100.0 * f.sched,
        100.0 * f.runtime,
        100.0 * f.app,
        f.total_s / H,
        report.ranks.len(),
        report.denominator
    );
    let data = node_json(&tree(&report.paths), "TOTAL", "", sort);
    let sort_name = match sort {
        Sort::Fixed => "fixed",
        Sort::Size => "size",
        Sort::Alpha => "alpha",
    };
    let mut out = String::with_capacity(16 * 1024);
    out.push_str(HEAD);
    let _ = write!(
        out,
        "<h1>goodput flame</h1>\n<p id=\"summary\">{}</p>\n",
        escape_html(&summary)
    );
    out.push_str(
        "<div id=\"sort\">sort:<button data-sort=\"fixed\">fixed</button>\
         <button data-sort=\"size\">size</button><button data-sort=\"alpha\">alpha</button></div>\n\
         <div id=\"flame\"></div>\n\
         <p class=\"hint\">click a box or a report row to zoom (click it again, or TOTAL, to zoom \
         out); hover to highlight the same path in both</p>\n<div id=\"report\"></div>\n\
         <div id=\"tip\"></div>\n",
    );
    let _ = write!(
        out,
        "<noscript><pre>{}</pre></noscript>\n<script type=\"application/json\" id=\"data\">{}</script>\n",
        escape_html(&report.text(sort)),
        script_safe_json(&json!({"tree": data, "sort": sort_name}))
    );
    out.push_str(SCRIPT);
    out.push_str("</body>\n</html>\n");
    out
}

/// A node as the page's script reads it: name, path, seconds (rounded to the millisecond, as
/// Lens's page), its rank in the fixed order, and its children ordered by `sort`.
fn node_json(node: &Node, name: &str, path: &str, sort: Sort) -> Value {
    let children: Vec<Value> = sorted(node, sort)
        .into_iter()
        .map(|(k, v)| {
            let p = if path.is_empty() {
                k.clone()
            } else {
                format!("{path};{k}")
            };
            node_json(v, k, &p, sort)
        })
        .collect();
    json!({
        "name": name,
        "path": path,
        "value": (node.s * 1000.0).round() / 1000.0,
        "order": super::classify::order(name),
        "children": children,
    })
}

/// Text as HTML element content.
fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// JSON that can sit inside a `<script>` element: the characters that could end it or start
/// markup are written as `\u` escapes (they only occur inside JSON strings, where the escape
/// reads back the same).
fn script_safe_json(v: &Value) -> String {
    let text = v.to_string();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

const HEAD: &str = r##"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>goodput flame</title>
<style>
body { font-family: ui-monospace, Menlo, Consolas, monospace; margin: 0; padding: 20px; color: #1b1b1b; background: #fcfcfc; }
h1 { font-size: 16px; margin: 0 0 4px; }
#summary { font-size: 12.5px; color: #404040; margin: 0 0 10px; white-space: pre-wrap; }
#sort { font-size: 12px; color: #505050; margin: 0 0 10px; }
#sort button { font: inherit; margin-left: 6px; padding: 2px 10px; border: 1px solid #b0b0b0; background: #fff; border-radius: 3px; cursor: pointer; }
#sort button.on { background: #303030; color: #fff; border-color: #303030; }
#flame { position: relative; margin-bottom: 6px; }
.box { position: absolute; box-sizing: border-box; height: 24px; line-height: 22px; border: 1px solid #fff; padding-left: 4px; font-size: 11px; overflow: hidden; white-space: nowrap; cursor: pointer; }
.hint { color: #858585; font-size: 11px; margin: 6px 0; }
#report { font-size: 12px; border-top: 1px solid #ddd; padding-top: 8px; }
.row { white-space: pre; cursor: pointer; padding: 0 3px; border-radius: 3px; }
.row:hover { background: #eee; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 8px; border: 1px solid #888; border-radius: 2px; vertical-align: -1px; }
.lit { outline: 2px solid #f5c400; outline-offset: -2px; z-index: 5; }
.row.lit { background: #ffe27a; outline: none; }
#tip { position: fixed; display: none; pointer-events: none; background: #202020; color: #fff; font-size: 12px; padding: 4px 8px; border-radius: 3px; white-space: nowrap; z-index: 9; }
</style>
</head>
<body>
"##;

const SCRIPT: &str = r##"<script>
(function () {
  "use strict";
  var input = JSON.parse(document.getElementById("data").textContent);
  var root = input.tree, mode = input.sort, zoomed = root, HOUR = 3600, ROW_PX = 24;
  var flame = document.getElementById("flame"), report = document.getElementById("report");
  var tip = document.getElementById("tip"), byPath = {};

  function colour(path) {
    var table = [["GOOD", "#4b9e4b"], ["BAD;runtime;lost_work", "#b53c3c"], ["BAD;app", "#e2913a"],
                 ["BAD;scheduling", "#5b8fc2"], ["BAD;runtime;restart", "#3f73ab"],
                 ["BAD;runtime;defense", "#8366ad"], ["BAD;unobserved", "#9b9b9b"], ["BAD", "#c66b36"]];
    for (var i = 0; i < table.length; i++) {
      if (path.indexOf(table[i][0]) === 0) { return table[i][1]; }
    }
    return "#d2d2d2";
  }
  function children(node) {
    var kids = node.children.slice();
    kids.sort(function (a, b) {
      if (mode === "size") { return b.value - a.value; }
      if (mode === "alpha") { return a.name < b.name ? -1 : (a.name > b.name ? 1 : 0); }
      return (a.order - b.order) || (b.value - a.value) || (a.name < b.name ? -1 : 1);
    });
    return kids;
  }
  function share(node) { return root.value ? (100 * node.value / root.value).toFixed(1) : "0.0"; }
  function light(path, on) {
    (byPath[path] || []).forEach(function (el) { el.classList.toggle("lit", on); });
  }
  function remember(path, el) { (byPath[path] = byPath[path] || []).push(el); }
  function find(node, path) {
    if (node.path === path) { return node; }
    for (var i = 0; i < node.children.length; i++) {
      var hit = find(node.children[i], path);
      if (hit) { return hit; }
    }
    return null;
  }
  function zoom(node) { zoomed = (node === zoomed) ? root : node; draw(); }
  function pad(text, width, left) {
    text = String(text);
    while (text.length < width) { text = left ? " " + text : text + " "; }
    return text;
  }

  function drawFlame() {
    flame.textContent = "";
    var width = Math.max(700, document.body.clientWidth - 40), deepest = 0;
    (function place(node, depth, x, w) {
      deepest = Math.max(deepest, depth);
      var box = document.createElement("div");
      box.className = "box";
      box.style.left = x + "px";
      box.style.top = (depth * ROW_PX) + "px";
      box.style.width = Math.max(0, w - 1) + "px";
      box.style.background = colour(node.path);
      if (w > 30) { box.textContent = node.name + "  " + share(node) + "%"; }
      box.onmouseover = function () {
        light(node.path, true);
        tip.textContent = (node.path || "TOTAL") + "   " + (node.value / HOUR).toFixed(3) +
          " gpu-h   " + share(node) + "% of total";
        tip.style.display = "block";
      };
      box.onmousemove = function (e) {
        tip.style.left = (e.clientX + 12) + "px";
        tip.style.top = (e.clientY + 12) + "px";
      };
      box.onmouseout = function () { light(node.path, false); tip.style.display = "none"; };
      box.onclick = function (e) { e.stopPropagation(); zoom(node); };
      remember(node.path, box);
      flame.appendChild(box);
      var kids = children(node), cursor = x;
      for (var i = 0; i < kids.length && node.value; i++) {
        var kw = w * kids[i].value / node.value;
        place(kids[i], depth + 1, cursor, kw);
        cursor += kw;
      }
    })(zoomed, 0, 0, width);
    flame.style.height = ((deepest + 1) * ROW_PX + 6) + "px";
  }

  function drawReport() {
    report.textContent = "";
    (function line(node, parentValue, prefix, last, top) {
      var label = top ? node.name : prefix + (last ? "\u2514\u2500\u2500 " : "\u251c\u2500\u2500 ") + node.name;
      var ofParent = parentValue ? (100 * node.value / parentValue).toFixed(1) : "100.0";
      var row = document.createElement("div");
      row.className = "row";
      var swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = colour(node.path);
      row.appendChild(swatch);
      row.appendChild(document.createTextNode(pad(label, 44) + pad((node.value / HOUR).toFixed(3), 8, true) +
        " gpu-h " + pad(share(node), 6, true) + "% tot " + pad(ofParent, 6, true) + "% par"));
      row.onmouseover = function () { light(node.path, true); };
      row.onmouseout = function () { light(node.path, false); };
      row.onclick = function () { zoom(find(root, node.path) || root); window.scrollTo(0, 0); };
      remember(node.path, row);
      report.appendChild(row);
      var inner = top ? "" : prefix + (last ? "    " : "\u2502   ");
      var kids = children(node);
      for (var i = 0; i < kids.length; i++) { line(kids[i], node.value, inner, i === kids.length - 1, false); }
    })(root, root.value, "", true, true);
  }

  function draw() {
    byPath = {};
    var buttons = document.querySelectorAll("#sort button");
    for (var i = 0; i < buttons.length; i++) {
      buttons[i].className = buttons[i].getAttribute("data-sort") === mode ? "on" : "";
      buttons[i].onclick = function () { mode = this.getAttribute("data-sort"); draw(); };
    }
    drawFlame();
    drawReport();
  }
  window.onresize = drawFlame;
  draw();
})();
</script>
"##;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_in_the_page_cannot_close_its_element() {
        let v = json!({"name": "</script><script>alert(1)</script>&\u{2028}"});
        let s = script_safe_json(&v);
        assert!(!s.contains('<') && !s.contains('>') && !s.contains('&'));
        assert!(!s.contains('\u{2028}'));
        let back: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn html_text_is_escaped() {
        assert_eq!(
            escape_html("<b a=\"x\">'&'</b>"),
            "&lt;b a=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/b&gt;"
        );
    }
}
