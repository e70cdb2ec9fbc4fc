//! Sliders and stage stores: the 5 x 5 instance through a coordinator,
//! prefixes plan against frontier plan (`-- sliders`), and the frontier plan
//! with its stage data in the coordinator, a directory and S3 (`-- stage-store`).

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::runner_cluster::{Setup, median_cluster_with};
use crate::runner_processes::reap;

/// The 5 x 5 sliders instance of docs/kinds/sliders.md, as `tally submit` arguments.
const SLIDERS_5X5: [&str; 9] = [
    "sliders",
    "--rows",
    "5",
    "--cols",
    "5",
    "--start",
    "WRRBB/RRRBB/RRBBB/RRRBB/RRBBB",
    "--target",
    "WBRBR/BRBRB/RBRBR/BRBRB/RBRBR",
];

/// The sliders 5 x 5 instance of docs/kinds/sliders.md through a coordinator with one
/// worker process of two slots: the prefixes plan (the coordinator searches
/// while planning) against the frontier plan (the workers search), with the
/// stage data in the coordinator's store and in a `file://` stage store.
pub fn sliders(runs: usize) {
    let board = SLIDERS_5X5;
    let stage_dir = tempfile::tempdir().unwrap();
    let stage_store = Setup {
        coordinator_args: vec![
            "--stage-store".into(),
            format!("file://{}", stage_dir.path().display()),
        ],
        ..Setup::default()
    };
    let runs_of = [
        ("prefixes", "", Setup::default()),
        ("frontier", "", Setup::default()),
        ("frontier", ", stage data in a file:// store", stage_store),
    ];
    let mut answers = Vec::new();
    let mut walls = Vec::new();
    for (plan, store, setup) in &runs_of {
        let submit = [&board[..], &["--plan", plan]].concat();
        let c = median_cluster_with(&submit, &[2], setup, runs);
        println!(
            "sliders 5 x 5, {plan} plan{store}, 1 worker process of 2 slots: {:.2} s; \
             coordinator CPU {:.2} s, peak {:.0} MB; worker peak {:.0} MB (answer {})",
            c.wall,
            c.coordinator_cpu,
            c.coordinator_rss as f64 / 1e6,
            c.worker_rss[0] as f64 / 1e6,
            c.answer
        );
        answers.push(c.answer);
        walls.push(c.wall);
    }
    assert!(
        answers.windows(2).all(|w| w[0] == w[1]),
        "the plans disagree"
    );
    println!(
        "sliders 5 x 5: frontier plan / prefixes plan wall time {:.2}; with a file:// stage \
         store {:.2}",
        walls[1] / walls[0],
        walls[2] / walls[0]
    );
}

/// The 5 x 5 sliders frontier job with its stage data in each store.
// moto_server is reaped by wait4.
#[allow(clippy::zombie_processes)]
pub fn stage_stores(runs: usize) {
    let submit = [&SLIDERS_5X5[..], &["--plan", "frontier"]].concat();
    let stage_dir = tempfile::tempdir().unwrap();
    let mut stores = vec![
        ("coordinator", Setup::default()),
        (
            "file://",
            Setup {
                coordinator_args: vec![
                    "--stage-store".into(),
                    format!("file://{}", stage_dir.path().display()),
                ],
                ..Setup::default()
            },
        ),
    ];
    let moto = moto_server();
    if let Some((_, port)) = &moto {
        stores.push((
            "s3:// (moto)",
            Setup {
                coordinator_args: vec!["--stage-store".into(), "s3://tally-stage/bench".into()],
                env: [
                    ("AWS_ACCESS_KEY_ID", "bench".to_string()),
                    ("AWS_SECRET_ACCESS_KEY", "bench".to_string()),
                    ("AWS_REGION", "us-east-1".to_string()),
                    ("AWS_ALLOW_HTTP", "true".to_string()),
                    ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
                ..Setup::default()
            },
        ));
    } else {
        println!("moto_server not found (pip install \"moto[server]\"): no S3 run");
    }
    let mut answers = Vec::new();
    for (name, setup) in &stores {
        let c = median_cluster_with(&submit, &[2], setup, runs);
        println!(
            "sliders 5 x 5 frontier, stage data in {name}: {:.2} s; coordinator CPU {:.2} s, \
             peak {:.0} MB, store {:.1} MB at the end; worker peak {:.0} MB (answer {})",
            c.wall,
            c.coordinator_cpu,
            c.coordinator_rss as f64 / 1e6,
            c.store_bytes as f64 / 1e6,
            c.worker_rss[0] as f64 / 1e6,
            c.answer
        );
        answers.push(c.answer);
    }
    assert!(
        answers.windows(2).all(|w| w[0] == w[1]),
        "the stores disagree"
    );
    if let Some((server, _)) = moto {
        reap(server.id(), libc::SIGKILL);
    }
}

/// A moto S3 server on a free loopback port, with the bucket `tally-stage`.
fn moto_server() -> Option<(std::process::Child, u16)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let server = Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    for _ in 0..300 {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            use std::io::{Read, Write};
            let request = format!(
                "PUT /tally-stage HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let mut answer = String::new();
            if stream.write_all(request.as_bytes()).is_ok()
                && stream.read_to_string(&mut answer).is_ok()
                && answer.starts_with("HTTP/1.1 200")
            {
                return Some((server, port));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}
