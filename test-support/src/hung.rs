//! A collector that hangs: it accepts TCP connections on a loopback port and never answers
//! (no HTTP response, no HTTP/2 settings), as a wedged collector or a black-holing proxy does.

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The hung collector; it lives as long as the test process.
pub struct HungCollector {
    /// The loopback port it accepts connections on.
    pub port: u16,
    connections: Arc<AtomicUsize>,
}

impl HungCollector {
    /// Listens on a free loopback port and starts accepting (and holding) connections.
    ///
    /// ```
    /// let hung = nemo_lens_test_support::hung::HungCollector::start();
    /// assert!(hung.endpoint().starts_with("http://127.0.0.1:"));
    /// ```
    pub fn start() -> HungCollector {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let count = connections.clone();
        let held: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                // Kept open, never read from or answered.
                held.lock().unwrap().push(stream);
            }
        });
        HungCollector { port, connections }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Connections accepted so far (one per export attempt with a blocking HTTP client).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}
