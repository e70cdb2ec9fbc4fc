//! A real S3 endpoint for the stage-store tests: the `moto` server from PyPI
//! on a free port, with a bucket, reached through a TCP proxy that the tests
//! stop and start to make the endpoint unreachable (moto keeps objects in
//! memory only, so the server itself is never restarted). CI installs moto;
//! elsewhere a test without it skips, saying so.

use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{ChildGuard, free_port, http_request};

/// The bucket every test uses, under a prefix of its own.
pub const BUCKET: &str = "tally-stage";
/// The secret key the tests give: it must never appear in a log, a status
/// page, an event or a metric.
pub const SECRET: &str = "s3cr3t-never-logged-7f3a9";

pub struct MotoS3 {
    _server: ChildGuard,
    proxy: Proxy,
}

impl MotoS3 {
    /// A moto server with the bucket, or `None` (and a message) where moto
    /// is not installed outside CI; CI must have it.
    pub fn start() -> Option<MotoS3> {
        let found = Command::new("moto_server")
            .arg("--help")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            assert!(
                std::env::var_os("CI").is_none(),
                "moto_server is required in CI (pip install \"moto[server]\")"
            );
            eprintln!("skipped: pip install \"moto[server]\" to run the S3 stage-store tests");
            return None;
        }
        let port = free_port();
        let server = ChildGuard(
            Command::new("moto_server")
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                // Small multipart parts, as the mid-upload test writes them.
                .env("S3_UPLOAD_PART_MIN_SIZE", "256")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("moto_server starts"),
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let server = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            if let Ok((status, _)) = http_request(server, "PUT", &format!("/{BUCKET}")) {
                assert!(
                    (200..300).contains(&status),
                    "creating the bucket: HTTP {status}"
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "moto_server did not answer within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(MotoS3 {
            _server: server,
            proxy: Proxy::start(port),
        })
    }

    /// The AWS environment of a process that uses the store (through the proxy).
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ACCESS_KEY_ID", "tally-test"),
            ("AWS_SECRET_ACCESS_KEY", SECRET),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ALLOW_HTTP", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .chain([(
            "AWS_ENDPOINT_URL".to_string(),
            format!("http://127.0.0.1:{}", self.proxy.port),
        )])
        .collect()
    }

    /// Sets [`MotoS3::env`] in this process. Only before any thread that
    /// could read the environment starts (a sync test, before its runtime).
    pub fn set_env(&self) {
        for (key, value) in self.env() {
            // SAFETY: called while the test is single-threaded.
            unsafe { std::env::set_var(key, value) };
        }
    }

    /// Makes the endpoint unreachable: connections are refused, and those
    /// open are cut.
    pub fn stop(&self) {
        self.proxy.stop();
    }

    /// Makes it reachable again, on the same port.
    pub fn resume(&self) {
        self.proxy.resume();
    }
}

/// A TCP proxy on a port of its own to `127.0.0.1:target`.
struct Proxy {
    port: u16,
    target: u16,
    state: Arc<ProxyState>,
}

#[derive(Default)]
struct ProxyState {
    stopped: AtomicBool,
    listener: Mutex<Option<TcpListener>>,
    open: Mutex<Vec<TcpStream>>,
}

impl Proxy {
    fn start(target: u16) -> Proxy {
        let proxy = Proxy {
            port: free_port(),
            target,
            state: Arc::default(),
        };
        proxy.resume();
        proxy
    }

    fn stop(&self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        if let Some(listener) = self.state.listener.lock().unwrap().take() {
            // Wake the accept loop, which then sees `stopped` and drops it.
            let _ = TcpStream::connect(listener.local_addr().unwrap());
        }
        for stream in self.state.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    fn resume(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", self.port)) {
                Ok(listener) => break listener,
                Err(e) if Instant::now() > deadline => panic!("the proxy's port stays taken: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        self.state.stopped.store(false, Ordering::SeqCst);
        *self.state.listener.lock().unwrap() = Some(listener.try_clone().unwrap());
        let (state, target) = (self.state.clone(), self.target);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if state.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let mut open = state.open.lock().unwrap();
                open.push(client.try_clone().unwrap());
                open.push(server.try_clone().unwrap());
                drop(open);
                pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                pipe(server, client);
            }
        });
    }
}

/// Copies `from` to `to` on a thread of its own until either closes.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from, &mut to);
        let _ = to.shutdown(Shutdown::Write);
    });
}
