/*
 * NVTX injection library that records every NVTX call it receives, one JSON
 * object per line, to the file named by NVTX_RECORDER_PATH: a stand-in for a profiler such as
 * Nsight Systems, loaded the way NVTX loads one. The tests of tests/gpu build it with the system
 * C compiler.
 *
 * Loaded by the NVTX v3 implementation compiled into the program (nvtx-sys
 * builds it in) when NVTX_INJECTION64_PATH names this file. The ABI types
 * below are NVTX v3's (nvToolsExt.h, nvtxDetail/nvtxTypes.h): stable, so the
 * library needs no NVTX headers.
 *
 * Build:  cc -shared -fPIC -O2 -Wall -Wextra -pthread -o libnvtx_recorder.so nvtx_recorder.c
 * Use:    NVTX_INJECTION64_PATH=/abs/libnvtx_recorder.so NVTX_RECORDER_PATH=/tmp/rec.jsonl ./prog
 *
 * Records ("op" field):
 *   init            {"version":N}               InitializeInjectionNvtx2 ran
 *   domain_create   {"domain":D,"name":S}       D = this library's domain number (1, 2, ...)
 *   domain_destroy  {"domain":D}
 *   register_string {"domain":D,"string":K,"text":S}
 *   name_category   {"domain":D|0,"category":C,"name":S}      (0: global scope)
 *   name_thread     {"os_tid":T,"name":S}
 *   push / start / mark  {"domain":D|0,"message":S|null,"category":C,
 *                         "color":"AARRGGBB"|null,"payload":P|null,"level"|"range":N}
 *   pop             {"domain":D|0,"level":N}    level = depth after the pop (-1: nothing open)
 *   end             {"domain":D|0,"range":N}
 * Every record has "tid" (gettid of the calling thread) and "seq" (global order).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <wchar.h>

/* ---- NVTX v3 ABI ---------------------------------------------------- */

typedef uint64_t nvtxRangeId_t;
typedef struct recorder_domain *nvtxDomainHandle_t;
typedef struct recorder_string *nvtxStringHandle_t;

enum { NVTX_COLOR_UNKNOWN = 0, NVTX_COLOR_ARGB = 1 };
enum {
    NVTX_MESSAGE_UNKNOWN = 0,
    NVTX_MESSAGE_TYPE_ASCII = 1,
    NVTX_MESSAGE_TYPE_UNICODE = 2,
    NVTX_MESSAGE_TYPE_REGISTERED = 3,
};
enum {
    NVTX_PAYLOAD_UNKNOWN = 0,
    NVTX_PAYLOAD_TYPE_UNSIGNED_INT64 = 1,
    NVTX_PAYLOAD_TYPE_INT64 = 2,
    NVTX_PAYLOAD_TYPE_DOUBLE = 3,
    NVTX_PAYLOAD_TYPE_UNSIGNED_INT32 = 4,
    NVTX_PAYLOAD_TYPE_INT32 = 5,
    NVTX_PAYLOAD_TYPE_FLOAT = 6,
};

typedef union {
    const char *ascii;
    const wchar_t *unicode;
    nvtxStringHandle_t registered;
} nvtxMessageValue_t;

typedef struct {
    uint16_t version;
    uint16_t size;
    uint32_t category;
    int32_t colorType;
    uint32_t color;
    int32_t payloadType;
    int32_t reserved0;
    union {
        uint64_t ullValue;
        int64_t llValue;
        double dValue;
        uint32_t uiValue;
        int32_t iValue;
        float fValue;
    } payload;
    int32_t messageType;
    nvtxMessageValue_t message;
} nvtxEventAttributes_t;

typedef void (*NvtxFunctionPointer)(void);
typedef NvtxFunctionPointer **NvtxFunctionTable;
typedef const void *(*NvtxGetExportTableFunc_t)(uint32_t exportTableId);

enum { NVTX_ETID_CALLBACKS = 1, NVTX_ETID_VERSIONINFO = 3 };
enum { NVTX_CB_MODULE_CORE = 1, NVTX_CB_MODULE_CORE2 = 5 };

enum { /* NvtxCallbackIdCore */
    CORE_MarkEx = 1, CORE_MarkA = 2, CORE_MarkW = 3,
    CORE_RangeStartEx = 4, CORE_RangeStartA = 5, CORE_RangeStartW = 6,
    CORE_RangeEnd = 7,
    CORE_RangePushEx = 8, CORE_RangePushA = 9, CORE_RangePushW = 10,
    CORE_RangePop = 11,
    CORE_NameCategoryA = 12, CORE_NameCategoryW = 13,
    CORE_NameOsThreadA = 14, CORE_NameOsThreadW = 15,
};
enum { /* NvtxCallbackIdCore2 */
    CORE2_DomainMarkEx = 1, CORE2_DomainRangeStartEx = 2, CORE2_DomainRangeEnd = 3,
    CORE2_DomainRangePushEx = 4, CORE2_DomainRangePop = 5,
    CORE2_DomainResourceCreate = 6, CORE2_DomainResourceDestroy = 7,
    CORE2_DomainNameCategoryA = 8, CORE2_DomainNameCategoryW = 9,
    CORE2_DomainRegisterStringA = 10, CORE2_DomainRegisterStringW = 11,
    CORE2_DomainCreateA = 12, CORE2_DomainCreateW = 13,
    CORE2_DomainDestroy = 14, CORE2_Initialize = 15,
};

typedef struct {
    size_t struct_size;
    int (*GetModuleFunctionTable)(int module, NvtxFunctionTable *out_table,
                                  unsigned int *out_size);
} NvtxExportTableCallbacks;

typedef struct {
    size_t struct_size;
    uint32_t version;
    uint32_t reserved0;
    void (*SetInjectionNvtxVersion)(uint32_t version);
} NvtxExportTableVersionInfo;

/* ---- recorder state ------------------------------------------------- */

struct recorder_domain { unsigned id; };
struct recorder_string { unsigned id; unsigned domain; char *text; };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int out_fd = -1;
static unsigned long long seq;
static unsigned next_domain = 1, next_string = 1;
static unsigned long long next_range = 1;
/* push depth per thread, per domain slot (0 = global, 1.. = domains) */
#define MAX_DOMAINS 64
static __thread int depth[MAX_DOMAINS];

static long tid(void) { return syscall(SYS_gettid); }

/* Appends a JSON string (escaped, or null) to buf at `at`, keeps buf NUL-terminated
 * (truncating), returns the length it would have had. */
static size_t json_str(char *buf, size_t cap, size_t at, const char *s)
{
    if (!s) {
        at += (size_t)snprintf(buf + at, at < cap ? cap - at : 0, "null");
        buf[at < cap ? at : cap - 1] = 0;
        return at;
    }
    if (at < cap) buf[at] = '"';
    at++;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        const char *piece = esc;
        if (*p == '"') piece = "\\\"";
        else if (*p == '\\') piece = "\\\\";
        else if (*p < 0x20) snprintf(esc, sizeof esc, "\\u%04x", *p);
        else { esc[0] = (char)*p; esc[1] = 0; }
        for (; *piece; piece++, at++)
            if (at < cap) buf[at] = *piece;
    }
    if (at < cap) buf[at] = '"';
    at++;
    buf[at < cap ? at : cap - 1] = 0;
    return at;
}

/* Wide string to UTF-8 (lossy for invalid code points). */
static char *from_wide(const wchar_t *w)
{
    if (!w) return NULL;
    size_t n = wcslen(w);
    char *out = malloc(n * 4 + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = (uint32_t)w[i];
        if (c < 0x80) *o++ = (char)c;
        else if (c < 0x800) { *o++ = (char)(0xc0 | c >> 6); *o++ = (char)(0x80 | (c & 0x3f)); }
        else if (c < 0x10000) { *o++ = (char)(0xe0 | c >> 12); *o++ = (char)(0x80 | ((c >> 6) & 0x3f)); *o++ = (char)(0x80 | (c & 0x3f)); }
        else if (c < 0x110000) { *o++ = (char)(0xf0 | c >> 18); *o++ = (char)(0x80 | ((c >> 12) & 0x3f)); *o++ = (char)(0x80 | ((c >> 6) & 0x3f)); *o++ = (char)(0x80 | (c & 0x3f)); }
        else *o++ = '?';
    }
    *o = 0;
    return out;
}

/* Writes one record: `fmt` holds the fields after "op" (printf-style, already JSON). */
static void emit(const char *op, const char *fields)
{
    char line[4096];
    pthread_mutex_lock(&lock);
    unsigned long long n = ++seq;
    pthread_mutex_unlock(&lock);
    int len = snprintf(line, sizeof line, "{\"seq\":%llu,\"tid\":%ld,\"op\":\"%s\"%s%s}\n",
                       n, tid(), op, *fields ? "," : "", fields);
    if (len < 0) return;
    if ((size_t)len >= sizeof line) len = (int)sizeof line - 1, line[len - 1] = '\n';
    if (out_fd >= 0) (void)!write(out_fd, line, (size_t)len);
}

static unsigned domain_id(nvtxDomainHandle_t d) { return d ? d->id : 0; }

/* Formats the attributes of a push/start/mark into buf. */
static void attrs_json(char *buf, size_t cap, unsigned domain, const nvtxEventAttributes_t *a,
                       const char *extra_key, long long extra)
{
    size_t at = (size_t)snprintf(buf, cap, "\"domain\":%u,\"message\":", domain);
    char *owned = NULL;
    const char *msg = NULL;
    if (a) {
        switch (a->messageType) {
        case NVTX_MESSAGE_TYPE_ASCII: msg = a->message.ascii; break;
        case NVTX_MESSAGE_TYPE_UNICODE: msg = owned = from_wide(a->message.unicode); break;
        case NVTX_MESSAGE_TYPE_REGISTERED: msg = a->message.registered ? a->message.registered->text : NULL; break;
        }
    }
    at = json_str(buf, cap, at, msg);
    free(owned);
    if (at >= cap) return;
    at += (size_t)snprintf(buf + at, cap - at, ",\"category\":%u,\"color\":", a ? a->category : 0);
    if (a && a->colorType == NVTX_COLOR_ARGB)
        at += (size_t)snprintf(buf + at, cap - at, "\"%08X\"", a->color);
    else
        at += (size_t)snprintf(buf + at, cap - at, "null");
    if (at >= cap) return;
    at += (size_t)snprintf(buf + at, cap - at, ",\"payload\":");
    if (!a) at += (size_t)snprintf(buf + at, cap - at, "null");
    else switch (a->payloadType) {
    case NVTX_PAYLOAD_TYPE_UNSIGNED_INT64: at += (size_t)snprintf(buf + at, cap - at, "%llu", (unsigned long long)a->payload.ullValue); break;
    case NVTX_PAYLOAD_TYPE_INT64: at += (size_t)snprintf(buf + at, cap - at, "%lld", (long long)a->payload.llValue); break;
    case NVTX_PAYLOAD_TYPE_DOUBLE: at += (size_t)snprintf(buf + at, cap - at, "%.17g", a->payload.dValue); break;
    case NVTX_PAYLOAD_TYPE_UNSIGNED_INT32: at += (size_t)snprintf(buf + at, cap - at, "%u", a->payload.uiValue); break;
    case NVTX_PAYLOAD_TYPE_INT32: at += (size_t)snprintf(buf + at, cap - at, "%d", a->payload.iValue); break;
    case NVTX_PAYLOAD_TYPE_FLOAT: at += (size_t)snprintf(buf + at, cap - at, "%.9g", (double)a->payload.fValue); break;
    default: at += (size_t)snprintf(buf + at, cap - at, "null");
    }
    if (extra_key && at < cap)
        snprintf(buf + at, cap - at, ",\"%s\":%lld", extra_key, extra);
}

static nvtxEventAttributes_t ascii_attrs(const char *message)
{
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof a);
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = message;
    return a;
}

static nvtxEventAttributes_t wide_attrs(const wchar_t *message)
{
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof a);
    a.messageType = NVTX_MESSAGE_TYPE_UNICODE;
    a.message.unicode = message;
    return a;
}

/* ---- callbacks -------------------------------------------------------- */

static void mark(unsigned domain, const nvtxEventAttributes_t *a)
{
    char f[3072];
    attrs_json(f, sizeof f, domain, a, NULL, 0);
    emit("mark", f);
}

static nvtxRangeId_t start(unsigned domain, const nvtxEventAttributes_t *a)
{
    pthread_mutex_lock(&lock);
    nvtxRangeId_t id = next_range++;
    pthread_mutex_unlock(&lock);
    char f[3072];
    attrs_json(f, sizeof f, domain, a, "range", (long long)id);
    emit("start", f);
    return id;
}

static void end(unsigned domain, nvtxRangeId_t id)
{
    char f[96];
    snprintf(f, sizeof f, "\"domain\":%u,\"range\":%llu", domain, (unsigned long long)id);
    emit("end", f);
}

static int push(unsigned domain, const nvtxEventAttributes_t *a)
{
    int level = domain < MAX_DOMAINS ? depth[domain]++ : 0;
    char f[3072];
    attrs_json(f, sizeof f, domain, a, "level", level);
    emit("push", f);
    return level;
}

static int pop(unsigned domain)
{
    int level = -1;
    if (domain < MAX_DOMAINS && depth[domain] > 0)
        level = --depth[domain];
    char f[64];
    snprintf(f, sizeof f, "\"domain\":%u,\"level\":%d", domain, level);
    emit("pop", f);
    return level;
}

static void name_category(unsigned domain, uint32_t category, const char *name)
{
    char f[2048];
    size_t at = (size_t)snprintf(f, sizeof f, "\"domain\":%u,\"category\":%u,\"name\":", domain, category);
    json_str(f, sizeof f, at, name);
    f[sizeof f - 1] = 0;
    emit("name_category", f);
}

/* core (global scope) */
static void c_MarkEx(const nvtxEventAttributes_t *a) { mark(0, a); }
static void c_MarkA(const char *m) { nvtxEventAttributes_t a = ascii_attrs(m); mark(0, &a); }
static void c_MarkW(const wchar_t *m) { nvtxEventAttributes_t a = wide_attrs(m); mark(0, &a); }
static nvtxRangeId_t c_RangeStartEx(const nvtxEventAttributes_t *a) { return start(0, a); }
static nvtxRangeId_t c_RangeStartA(const char *m) { nvtxEventAttributes_t a = ascii_attrs(m); return start(0, &a); }
static nvtxRangeId_t c_RangeStartW(const wchar_t *m) { nvtxEventAttributes_t a = wide_attrs(m); return start(0, &a); }
static void c_RangeEnd(nvtxRangeId_t id) { end(0, id); }
static int c_RangePushEx(const nvtxEventAttributes_t *a) { return push(0, a); }
static int c_RangePushA(const char *m) { nvtxEventAttributes_t a = ascii_attrs(m); return push(0, &a); }
static int c_RangePushW(const wchar_t *m) { nvtxEventAttributes_t a = wide_attrs(m); return push(0, &a); }
static int c_RangePop(void) { return pop(0); }
static void c_NameCategoryA(uint32_t c, const char *n) { name_category(0, c, n); }
static void c_NameCategoryW(uint32_t c, const wchar_t *n) { char *s = from_wide(n); name_category(0, c, s); free(s); }
static void name_thread(uint32_t os_tid, const char *n)
{
    char f[2048];
    size_t at = (size_t)snprintf(f, sizeof f, "\"os_tid\":%u,\"name\":", os_tid);
    json_str(f, sizeof f, at, n);
    f[sizeof f - 1] = 0;
    emit("name_thread", f);
}
static void c_NameOsThreadA(uint32_t t, const char *n) { name_thread(t, n); }
static void c_NameOsThreadW(uint32_t t, const wchar_t *n) { char *s = from_wide(n); name_thread(t, s); free(s); }

/* core2 (domains) */
static void d_MarkEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) { mark(domain_id(d), a); }
static nvtxRangeId_t d_RangeStartEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) { return start(domain_id(d), a); }
static void d_RangeEnd(nvtxDomainHandle_t d, nvtxRangeId_t id) { end(domain_id(d), id); }
static int d_RangePushEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) { return push(domain_id(d), a); }
static int d_RangePop(nvtxDomainHandle_t d) { return pop(domain_id(d)); }
static void d_NameCategoryA(nvtxDomainHandle_t d, uint32_t c, const char *n) { name_category(domain_id(d), c, n); }
static void d_NameCategoryW(nvtxDomainHandle_t d, uint32_t c, const wchar_t *n) { char *s = from_wide(n); name_category(domain_id(d), c, s); free(s); }

static nvtxStringHandle_t register_string(nvtxDomainHandle_t d, char *text /* owned */)
{
    struct recorder_string *s = calloc(1, sizeof *s);
    if (!s) { free(text); return NULL; }
    pthread_mutex_lock(&lock);
    s->id = next_string++;
    pthread_mutex_unlock(&lock);
    s->domain = domain_id(d);
    s->text = text;
    char f[2048];
    size_t at = (size_t)snprintf(f, sizeof f, "\"domain\":%u,\"string\":%u,\"text\":", s->domain, s->id);
    json_str(f, sizeof f, at, text);
    f[sizeof f - 1] = 0;
    emit("register_string", f);
    return s; /* never freed: NVTX string handles live as long as the process */
}
static nvtxStringHandle_t d_RegisterStringA(nvtxDomainHandle_t d, const char *s) { return register_string(d, s ? strdup(s) : NULL); }
static nvtxStringHandle_t d_RegisterStringW(nvtxDomainHandle_t d, const wchar_t *s) { return register_string(d, from_wide(s)); }

static nvtxDomainHandle_t create_domain(const char *name)
{
    struct recorder_domain *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    pthread_mutex_lock(&lock);
    d->id = next_domain++;
    pthread_mutex_unlock(&lock);
    char f[2048];
    size_t at = (size_t)snprintf(f, sizeof f, "\"domain\":%u,\"name\":", d->id);
    json_str(f, sizeof f, at, name);
    f[sizeof f - 1] = 0;
    emit("domain_create", f);
    return d;
}
static nvtxDomainHandle_t d_DomainCreateA(const char *n) { return create_domain(n); }
static nvtxDomainHandle_t d_DomainCreateW(const wchar_t *n) { char *s = from_wide(n); nvtxDomainHandle_t d = create_domain(s); free(s); return d; }
static void d_DomainDestroy(nvtxDomainHandle_t d)
{
    char f[64];
    snprintf(f, sizeof f, "\"domain\":%u", domain_id(d));
    emit("domain_destroy", f);
    /* the handle is not freed: strings registered in it may still be referenced */
}
static void d_Initialize(const void *reserved) { (void)reserved; emit("initialize", ""); }

/* ---- entry point ------------------------------------------------------ */

static int install(NvtxExportTableCallbacks const *cb, int module,
                   const NvtxFunctionPointer *fns, unsigned count)
{
    NvtxFunctionTable table = NULL;
    unsigned int size = 0;
    if (!cb->GetModuleFunctionTable(module, &table, &size) || !table)
        return 0;
    for (unsigned i = 1; i < count && i < size; i++)
        if (fns[i] && table[i])
            *table[i] = fns[i];
    return 1;
}

#define FP(f) ((NvtxFunctionPointer)(void (*)(void))(f))

__attribute__((visibility("default")))
int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t getExportTable)
{
    const char *path = getenv("NVTX_RECORDER_PATH");
    if (path && *path)
        out_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);

    const NvtxExportTableCallbacks *cb = getExportTable(NVTX_ETID_CALLBACKS);
    if (!cb || cb->struct_size < sizeof *cb)
        return 0;
    const NvtxExportTableVersionInfo *vi = getExportTable(NVTX_ETID_VERSIONINFO);
    uint32_t version = 0;
    if (vi && vi->struct_size >= sizeof *vi) {
        version = vi->version;
        if (vi->SetInjectionNvtxVersion)
            vi->SetInjectionNvtxVersion(3);
    }

    NvtxFunctionPointer core[16] = {0};
    core[CORE_MarkEx] = FP(c_MarkEx);
    core[CORE_MarkA] = FP(c_MarkA);
    core[CORE_MarkW] = FP(c_MarkW);
    core[CORE_RangeStartEx] = FP(c_RangeStartEx);
    core[CORE_RangeStartA] = FP(c_RangeStartA);
    core[CORE_RangeStartW] = FP(c_RangeStartW);
    core[CORE_RangeEnd] = FP(c_RangeEnd);
    core[CORE_RangePushEx] = FP(c_RangePushEx);
    core[CORE_RangePushA] = FP(c_RangePushA);
    core[CORE_RangePushW] = FP(c_RangePushW);
    core[CORE_RangePop] = FP(c_RangePop);
    core[CORE_NameCategoryA] = FP(c_NameCategoryA);
    core[CORE_NameCategoryW] = FP(c_NameCategoryW);
    core[CORE_NameOsThreadA] = FP(c_NameOsThreadA);
    core[CORE_NameOsThreadW] = FP(c_NameOsThreadW);

    NvtxFunctionPointer core2[16] = {0};
    core2[CORE2_DomainMarkEx] = FP(d_MarkEx);
    core2[CORE2_DomainRangeStartEx] = FP(d_RangeStartEx);
    core2[CORE2_DomainRangeEnd] = FP(d_RangeEnd);
    core2[CORE2_DomainRangePushEx] = FP(d_RangePushEx);
    core2[CORE2_DomainRangePop] = FP(d_RangePop);
    core2[CORE2_DomainNameCategoryA] = FP(d_NameCategoryA);
    core2[CORE2_DomainNameCategoryW] = FP(d_NameCategoryW);
    core2[CORE2_DomainRegisterStringA] = FP(d_RegisterStringA);
    core2[CORE2_DomainRegisterStringW] = FP(d_RegisterStringW);
    core2[CORE2_DomainCreateA] = FP(d_DomainCreateA);
    core2[CORE2_DomainCreateW] = FP(d_DomainCreateW);
    core2[CORE2_DomainDestroy] = FP(d_DomainDestroy);
    core2[CORE2_Initialize] = FP(d_Initialize);

    if (!install(cb, NVTX_CB_MODULE_CORE, core, 16) || !install(cb, NVTX_CB_MODULE_CORE2, core2, 16))
        return 0;

    char f[32];
    snprintf(f, sizeof f, "\"version\":%u", version);
    emit("init", f);
    return 1;
}
