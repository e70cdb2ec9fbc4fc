//! Network faults between real processes: the coordinator and two workers each
//! in its own network namespace, joined by veth pairs. One worker's link gets
//! delay and loss, the other a partition (a silent black hole). All traffic
//! stays inside those namespaces; the test talks to the coordinator from a
//! thread that has entered the coordinator's namespace.
//!
//! Delay and loss come from `tc netem` where the kernel has the netem qdisc.
//! Kernels without it (`CONFIG_NET_SCH_NETEM` unset, as on some VM kernels) get
//! a userspace netem instead: an iptables `NFQUEUE` rule in the worker's
//! namespace hands its gRPC packets, both ways, to a thread of this test
//! ([`NfqNetem`]) that drops each with a seeded probability or accepts it after
//! a fixed delay. (nftables' own `queue` statement needs `CONFIG_NFT_QUEUE`,
//! which those kernels lack too; iptables' NFQUEUE target goes through
//! `nft_compat` or the legacy tables.)
//!
//! Needs root and `ip`/`tc` (iproute2), and `iptables` without netem. Without
//! them the test says so and passes, except under CI (`CI` set), where it
//! fails.

use crate::support;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::{ChildGuard, direct_answer, jobs_client, metric, submit, tally_bin};
use tally_kinds::kayles::KaylesSpec;
use tally_kinds::spec::JobSpec;
use tally_wire::proto::{self, JobState};

const PREFIX: &str = "tallynf";
const COORD_PORT: u16 = 7878;
const HTTP_PORT: u16 = 9090;

fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{cmd} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn ip(args: &[&str]) {
    run("ip", args).unwrap();
}

fn tc(args: &[&str]) {
    run("tc", args).unwrap();
}

/// Network namespaces named after this process, deleted on drop (also on a
/// panic), which deletes their veths and the processes' sockets with them.
struct Namespaces {
    names: Vec<String>,
}

impl Namespaces {
    /// Creates the namespaces, or says why it cannot.
    fn create(suffixes: &[&str]) -> Result<Namespaces, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        for tool in ["ip", "tc"] {
            run(tool, &["-V"]).map_err(|e| format!("{tool} unavailable: {e}"))?;
        }
        remove_stale();
        let mut ns = Namespaces { names: Vec::new() };
        for s in suffixes {
            let name = format!("{PREFIX}{}{s}", std::process::id());
            run("ip", &["netns", "add", &name])?;
            ns.names.push(name);
        }
        Ok(ns)
    }

    fn name(&self, i: usize) -> &str {
        &self.names[i]
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = run("ip", &["netns", "del", n]);
        }
    }
}

/// Namespaces left by a run that was killed (its pid is gone).
fn remove_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if !pid.is_empty() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = run("ip", &["netns", "del", name]);
        }
    }
}

/// Runs `f` on a thread inside network namespace `ns`: sockets it opens, and
/// processes it spawns, live there.
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{ns}");
    let handle = std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("open the namespace");
        use std::os::fd::AsRawFd;
        // SAFETY: setns on a valid namespace fd affects only this thread.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
        f()
    });
    match handle.join() {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Delay of each packet, each way, on b's link: the RTT grows by twice this.
const DELAY: Duration = Duration::from_millis(200);
/// Loss on b's link, each way, in percent.
const LOSS_PERCENT: u64 = 10;
/// The NFQUEUE number of the userspace netem.
const QUEUE_NUM: u16 = 7;

/// Counters of the userspace netem.
#[derive(Default)]
struct NetemStats {
    queued: AtomicU64,
    delayed: AtomicU64,
    dropped: AtomicU64,
}

/// netem in userspace, for kernels without the netem qdisc: iptables rules in
/// one namespace queue the packets to and from the coordinator's port to
/// NFQUEUE `QUEUE_NUM`, and a thread that entered that namespace binds the
/// queue and drops each packet with probability `LOSS_PERCENT`% (a seeded
/// RNG) or accepts it `DELAY` after it arrived. The kernel holds a queued
/// packet until its verdict, so the pending verdicts are the delay line; with a
/// fixed delay they are already in time order.
///
/// A thread rather than a child process: the queue socket belongs to the
/// namespace it is created in, which a thread after `setns` gives as well as
/// `ip netns exec`, and the counters come back without a side channel.
///
/// Fails closed: the rules have no `--queue-bypass` and the queue is not
/// fail-open, so if the thread stops (or panics, which `stop` reports) the
/// kernel drops the packets it held and every later one: b's link becomes a
/// black hole, never an unimpaired link.
struct NfqNetem {
    stop: Arc<AtomicBool>,
    stats: Arc<NetemStats>,
    handle: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl NfqNetem {
    /// Binds the queue inside `ns`, then adds the rules for traffic on `dev`
    /// to and from TCP port `port`.
    fn start(ns: &str, dev: &str, port: u16, seed: u64) -> Result<NfqNetem, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(NetemStats::default());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let path = format!("/var/run/netns/{ns}");
        let (stop2, stats2) = (stop.clone(), stats.clone());
        let handle = std::thread::spawn(move || -> Result<(), String> {
            let queue = (|| -> Result<nfq::Queue, String> {
                let file = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
                use std::os::fd::AsRawFd;
                // SAFETY: setns on a valid namespace fd affects only this thread.
                if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return Err(format!("setns: {}", std::io::Error::last_os_error()));
                }
                let mut q = nfq::Queue::open().map_err(|e| format!("nfqueue socket: {e}"))?;
                q.bind(QUEUE_NUM)
                    .map_err(|e| format!("bind queue {QUEUE_NUM}: {e}"))?;
                q.set_fail_open(QUEUE_NUM, false)
                    .and_then(|()| q.set_queue_max_len(QUEUE_NUM, 8192))
                    .map_err(|e| format!("configure queue {QUEUE_NUM}: {e}"))?;
                q.set_nonblocking(true);
                Ok(q)
            })();
            let mut queue = match queue {
                Ok(q) => {
                    let _ = ready_tx.send(Ok(()));
                    q
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e.clone()));
                    return Err(e);
                }
            };
            let mut rng = support::Rng::new(seed);
            let mut pending = std::collections::VecDeque::<(Instant, nfq::Message)>::new();
            let verdict_err = |e: std::io::Error| format!("verdict: {e}");
            while !stop2.load(Ordering::Relaxed) {
                loop {
                    match queue.recv() {
                        Ok(mut msg) => {
                            stats2.queued.fetch_add(1, Ordering::Relaxed);
                            if rng.chance(LOSS_PERCENT) {
                                msg.set_verdict(nfq::Verdict::Drop);
                                queue.verdict(msg).map_err(verdict_err)?;
                                stats2.dropped.fetch_add(1, Ordering::Relaxed);
                            } else {
                                msg.set_verdict(nfq::Verdict::Accept);
                                pending.push_back((Instant::now() + DELAY, msg));
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(format!("nfqueue recv: {e}")),
                    }
                }
                let now = Instant::now();
                while pending.front().is_some_and(|(due, _)| *due <= now) {
                    let (_, msg) = pending.pop_front().unwrap();
                    queue.verdict(msg).map_err(verdict_err)?;
                    stats2.delayed.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            // Stopping: let what is held through rather than have it dropped
            // with the socket.
            for (_, msg) in pending {
                queue.verdict(msg).map_err(verdict_err)?;
            }
            Ok(())
        });
        let mut netem = NfqNetem {
            stop,
            stats,
            handle: Some(handle),
        };
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(netem
                    .finish()
                    .err()
                    .unwrap_or_else(|| "userspace netem: the thread ended".into()));
            }
        }
        let port = port.to_string();
        for (chain, dir, ports) in [("OUTPUT", "-o", "--dport"), ("INPUT", "-i", "--sport")] {
            run(
                "ip",
                &[
                    "netns",
                    "exec",
                    ns,
                    "iptables",
                    "-w",
                    "-A",
                    chain,
                    dir,
                    dev,
                    "-p",
                    "tcp",
                    ports,
                    &port,
                    "-j",
                    "NFQUEUE",
                    "--queue-num",
                    &QUEUE_NUM.to_string(),
                ],
            )?;
        }
        Ok(netem)
    }

    /// Stops the thread: Err if it failed on the way.
    fn finish(&mut self) -> Result<(), String> {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take().map(|h| h.join()) {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(e))) => Err(format!("userspace netem: {e}")),
            Some(Err(_)) => Err("userspace netem: the thread panicked".into()),
        }
    }
}

impl Drop for NfqNetem {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// TCP connect times (the handshake's RTT) to `addr` from namespace `ns`:
/// `n` samples, sorted.
fn connect_rtts(ns: &str, addr: std::net::SocketAddr, n: usize) -> Vec<Duration> {
    let mut v = in_netns(ns, move || {
        (0..n)
            .map(|_| {
                let t = Instant::now();
                std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                    .expect("connect to the coordinator");
                t.elapsed()
            })
            .collect::<Vec<_>>()
    });
    v.sort();
    v
}

fn spawn_in(ns: &str, args: &[&str], log: &Path) -> ChildGuard {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    ChildGuard(
        Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(tally_bin())
            .args(args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn in namespace"),
    )
}

/// GET /metrics over plain HTTP/1.0 (from inside the coordinator's namespace).
fn metrics() -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", HTTP_PORT)).expect("metrics");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A worker cut off by a partition loses its lease: the lease expires and the
/// shard goes to the worker in the other namespace (whose link has 200 ms of
/// delay and 10% loss); after the partition heals the cut-off worker works
/// again, its stale report is refused, and nothing is merged twice.
#[test]
fn partition_expires_leases_and_the_shard_is_re_leased_elsewhere() {
    let ns = match Namespaces::create(&["c", "a", "b"]) {
        Ok(ns) => ns,
        Err(why) if std::env::var_os("CI").is_none() => {
            eprintln!("SKIPPED: network namespaces unavailable ({why}); run as root with iproute2");
            return;
        }
        Err(why) => panic!("CI is set but network namespaces are unavailable: {why}"),
    };
    let (c, a, b) = (
        ns.name(0).to_string(),
        ns.name(1).to_string(),
        ns.name(2).to_string(),
    );
    // c <-> a on 10.201.1.0/24, c <-> b on 10.201.2.0/24.
    for n in [&c, &a, &b] {
        ip(&["-n", n, "link", "set", "lo", "up"]);
    }
    for (peer, dev_c, dev_p, net) in [(&a, "vca", "vac", 1), (&b, "vcb", "vbc", 2)] {
        ip(&[
            "-n", &c, "link", "add", dev_c, "type", "veth", "peer", "name", dev_p, "netns", peer,
        ]);
        ip(&[
            "-n",
            &c,
            "addr",
            "add",
            &format!("10.201.{net}.1/24"),
            "dev",
            dev_c,
        ]);
        ip(&[
            "-n",
            peer,
            "addr",
            "add",
            &format!("10.201.{net}.2/24"),
            "dev",
            dev_p,
        ]);
        ip(&["-n", &c, "link", "set", dev_c, "up"]);
        ip(&["-n", peer, "link", "set", dev_p, "up"]);
    }
    // b's link gets delay and loss, both ways, once the coordinator runs (so
    // that the RTT before can be measured): with the netem qdisc if the
    // kernel has it, else with the userspace netem over NFQUEUE.
    let netem = run(
        "tc",
        &[
            "-n", &c, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms",
        ],
    )
    .is_ok();
    if netem {
        tc(&["-n", &c, "qdisc", "del", "dev", "lo", "root"]);
    } else if let Err(why) = run("ip", &["netns", "exec", &c, "iptables", "-w", "-L", "-n"]) {
        if std::env::var_os("CI").is_some() {
            panic!("CI is set, the kernel has no netem qdisc and iptables is unusable: {why}");
        }
        eprintln!(
            "SKIPPED: the kernel has no netem qdisc and iptables (for the NFQUEUE netem) \
             is unusable: {why}"
        );
        return;
    }
    let seed = std::env::var("TALLY_NETFAULTS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(now_ms);

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.txt");
    let data = dir.path().join("data");
    let (c2, a2, b2) = (c.clone(), a.clone(), b.clone());
    let log2 = log.clone();
    let result = in_netns(&c, move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(scenario(&c2, &a2, &b2, netem, seed, &data, &log2))
    });
    if let Err(e) = result {
        let logs = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: String = logs
            .lines()
            .rev()
            .take(60)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        panic!("{e}\n--- last log lines ---\n{tail}");
    }
}

async fn wait_event(
    client: &mut tally_wire::proto::job_service_client::JobServiceClient<tonic::transport::Channel>,
    job: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&proto::Event) -> bool,
) -> Result<proto::Event, String> {
    let deadline = Instant::now() + timeout;
    loop {
        let ev = support::events(client, job).await;
        if let Some(e) = ev.into_iter().find(|e| pred(e)) {
            return Ok(e);
        }
        if Instant::now() > deadline {
            return Err(format!("timed out after {timeout:?} waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn scenario(
    c: &str,
    a: &str,
    b: &str,
    netem: bool,
    seed: u64,
    data: &Path,
    log: &Path,
) -> Result<(), String> {
    let coord_url_a = format!("http://10.201.1.1:{COORD_PORT}");
    let coord_url_b = format!("http://10.201.2.1:{COORD_PORT}");
    let _coordinator = spawn_in(
        c,
        &[
            "coordinator",
            "--listen",
            &format!("0.0.0.0:{COORD_PORT}"),
            "--data",
            data.to_str().unwrap(),
            "--http",
            &format!("127.0.0.1:{HTTP_PORT}"),
            // Private namespaces joined by veth pairs: nothing else can reach it.
            "--insecure",
        ],
        log,
    );
    let mut client = jobs_client(&format!("http://127.0.0.1:{COORD_PORT}")).await;

    // b's link: RTT before, delay and loss, RTT after.
    let coord_b: std::net::SocketAddr = ([10, 201, 2, 1], COORD_PORT).into();
    let b_ = b.to_string();
    let rtt_before = tokio::task::spawn_blocking(move || connect_rtts(&b_, coord_b, 5))
        .await
        .unwrap();
    let (delay_ms, loss) = (DELAY.as_millis().to_string(), format!("{LOSS_PERCENT}%"));
    let mut userspace = None;
    if netem {
        for (n, dev) in [(c, "vcb"), (b, "vbc")] {
            tc(&[
                "-n",
                n,
                "qdisc",
                "add",
                "dev",
                dev,
                "root",
                "netem",
                "delay",
                &format!("{delay_ms}ms"),
                "loss",
                &loss,
            ]);
        }
    } else {
        userspace = Some(NfqNetem::start(b, "vbc", COORD_PORT, seed)?);
    }
    let b_ = b.to_string();
    let rtt_after = tokio::task::spawn_blocking(move || connect_rtts(&b_, coord_b, 5))
        .await
        .unwrap();
    // The delay holds back the SYN and the SYN-ACK: no handshake is faster
    // than twice the delay, whatever the load (a busy machine only slows the
    // samples taken before, which a relative bound would then miss).
    if rtt_after[0] < 2 * DELAY - Duration::from_millis(5) {
        return Err(format!(
            "b's connect time went from {rtt_before:?} to {rtt_after:?}, \
             not up by twice the {DELAY:?} delay"
        ));
    }

    let ttl_ms = 2_000;
    let mut spec1 = JobSpec::new(KaylesSpec {
        pins: 4_000,
        digits: 9,
    });
    spec1.options.lease_ttl_ms = ttl_ms;
    // The lossy link may let some of b's leases lapse: never enough to fail a job.
    spec1.options.max_attempts = 20;
    let job1 = submit(&mut client, &spec1, "").await;

    // Worker a holds each lease 10 s before computing, so the partition
    // catches it holding one even when this test runs slowly.
    let _wa = spawn_in(
        a,
        &[
            "worker",
            "--coordinator",
            &coord_url_a,
            "--id",
            "nf-a",
            "--slots",
            "1",
            "--threads",
            "1",
            "--shard-delay-ms",
            "10000",
        ],
        log,
    );
    let held = wait_event(
        &mut client,
        &job1.id,
        "a lease to worker a",
        Duration::from_secs(30),
        |e| e.kind == "leased" && e.worker_id == "nf-a",
    )
    .await?;

    // Partition: a's link drops everything, both ways (or goes down).
    if netem {
        for (n, dev) in [(c, "vca"), (a, "vac")] {
            tc(&[
                "-n", n, "qdisc", "add", "dev", dev, "root", "netem", "loss", "100%",
            ]);
        }
    } else {
        ip(&["-n", a, "link", "set", "vac", "down"]);
    }
    let partitioned_ms = now_ms();
    let mut wb = spawn_in(
        b,
        &[
            "worker",
            "--coordinator",
            &coord_url_b,
            "--id",
            "nf-b",
            "--slots",
            "4",
            "--threads",
            "1",
        ],
        log,
    );
    let same = |e: &proto::Event| (e.stage, e.shard) == (held.stage, held.shard);
    let expired = wait_event(
        &mut client,
        &job1.id,
        "the partitioned lease to expire",
        Duration::from_secs(30),
        |e| e.kind == "expired" && same(e) && e.attempt == held.attempt,
    )
    .await?;
    // b may take other shards first, and over its lossy link one report can
    // sit in TCP retransmission backoff for 15 s or more (four losses of one
    // segment): the bound allows several such stalls.
    let released = wait_event(
        &mut client,
        &job1.id,
        "the shard re-leased to worker b",
        Duration::from_secs(120),
        |e| e.kind == "leased" && same(e) && e.worker_id == "nf-b",
    )
    .await?;
    let done_by_b = wait_event(
        &mut client,
        &job1.id,
        "worker b's result for the shard",
        Duration::from_secs(120),
        |e| e.kind == "accepted" && same(e),
    )
    .await?;
    if done_by_b.worker_id != "nf-b" || done_by_b.attempt <= held.attempt {
        return Err(format!(
            "the shard was accepted from {} attempt {} (held by a at attempt {})",
            done_by_b.worker_id, done_by_b.attempt, held.attempt
        ));
    }

    // Heal, and give a a new job: it must lease and deliver again.
    if netem {
        for (n, dev) in [(c, "vca"), (a, "vac")] {
            tc(&["-n", n, "qdisc", "del", "dev", dev, "root"]);
        }
    } else {
        ip(&["-n", a, "link", "set", "vac", "up"]);
    }
    let healed_ms = now_ms();
    let mut spec2 = JobSpec::new(KaylesSpec {
        pins: 3_000,
        digits: 9,
    });
    spec2.options.lease_ttl_ms = ttl_ms;
    spec2.options.max_attempts = 20;
    // Job 1 may be done already; b stops so that job 2 waits for a, which
    // shows a works again, then b returns to finish job 2 quickly.
    let _ = support::wait_finished(&mut client, &job1.id, Duration::from_secs(60)).await;
    let job1_done_ms = now_ms();
    wb.kill9();
    let job2 = submit(&mut client, &spec2, "").await;
    let back = wait_event(
        &mut client,
        &job2.id,
        "worker a to deliver after healing",
        Duration::from_secs(60),
        |e| e.kind == "accepted" && e.worker_id == "nf-a",
    )
    .await?;
    let _wb = spawn_in(
        b,
        &[
            "worker",
            "--coordinator",
            &coord_url_b,
            "--id",
            "nf-b2",
            "--slots",
            "4",
            "--threads",
            "1",
        ],
        log,
    );

    let mut shards_total = 0;
    let mut expiries_in_events = 0;
    let mut expiries_of_b = 0;
    let mut re_leases = 0;
    for (job, spec) in [(&job1, &spec1), (&job2, &spec2)] {
        let done = support::wait_finished(&mut client, &job.id, Duration::from_secs(120)).await;
        if support::state(&done) != JobState::Succeeded {
            return Err(format!("{} ended {:?}: {}", job.id, done.state, done.error));
        }
        let want = direct_answer(spec);
        if done.answer != want {
            return Err(format!(
                "{}: answer {} but the kernels say {want}",
                job.id, done.answer
            ));
        }
        let ev = support::events(&mut client, &job.id).await;
        let mut accepted = std::collections::HashMap::new();
        let mut leased = std::collections::HashMap::<(u32, u32), u32>::new();
        for e in &ev {
            match e.kind.as_str() {
                "accepted" => *accepted.entry((e.stage, e.shard)).or_insert(0) += 1,
                "leased" => *leased.entry((e.stage, e.shard)).or_default() += 1,
                "expired" => {
                    expiries_in_events += 1;
                    if e.worker_id.starts_with("nf-b") {
                        expiries_of_b += 1;
                    }
                }
                _ => {}
            }
        }
        if accepted.len() as u64 != done.shards_total || accepted.values().any(|&n| n != 1) {
            return Err(format!("{}: shards accepted {accepted:?}", job.id));
        }
        re_leases += leased.values().map(|&n| n - 1).sum::<u32>();
        shards_total += done.shards_total;
    }
    let m = tokio::task::spawn_blocking(metrics).await.unwrap();
    let accepted_total = metric(&m, "tally_results_accepted_total");
    let expired_total = metric(&m, "tally_leases_expired_total");
    let refused_total = metric(&m, "tally_reports_refused_total");
    let link = match &userspace {
        None => format!(
            "netem qdisc, {} ms delay and {LOSS_PERCENT}% loss each way",
            DELAY.as_millis()
        ),
        Some(u) => format!(
            "userspace netem over NFQUEUE (seed {seed}), {} ms delay and {LOSS_PERCENT}% loss \
             each way: {} packets queued, {} delayed, {} dropped",
            DELAY.as_millis(),
            u.stats.queued.load(Ordering::Relaxed),
            u.stats.delayed.load(Ordering::Relaxed),
            u.stats.dropped.load(Ordering::Relaxed),
        ),
    };
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
    let rtts = |v: &[Duration]| v.iter().map(|&d| ms(d)).collect::<Vec<_>>().join(" ");
    eprintln!(
        "netfaults summary:\n  \
         b's link: {link}\n  \
         b's TCP connect to the coordinator, ms, before: {}; after: {}\n  \
         lease held by a: shard {}/{} attempt {}\n  \
         partition -> expiry:          {} ms (TTL {ttl_ms} ms)\n  \
         partition -> re-lease to b:   {} ms\n  \
         partition -> b's result:      {} ms\n  \
         partition -> job 1 finished:  {} ms\n  \
         heal -> a's next result:      {} ms (a holds each lease 10 s)\n  \
         leases expired (metrics/events): {expired_total} / {expiries_in_events} \
         (of b over the impaired link: {expiries_of_b})\n  \
         re-leases: {re_leases}; reports refused: {refused_total}\n  \
         results accepted (metrics): {accepted_total}; shards: {shards_total}",
        rtts(&rtt_before),
        rtts(&rtt_after),
        held.stage,
        held.shard,
        held.attempt,
        expired.time_ms.saturating_sub(partitioned_ms),
        released.time_ms.saturating_sub(partitioned_ms),
        done_by_b.time_ms.saturating_sub(partitioned_ms),
        job1_done_ms.saturating_sub(partitioned_ms),
        back.time_ms.saturating_sub(healed_ms),
    );
    if accepted_total != shards_total {
        return Err(format!(
            "tally_results_accepted_total is {accepted_total}, the jobs have {shards_total} shards"
        ));
    }
    if expired_total == 0 {
        return Err("no lease expiry counted".into());
    }
    if let Some(mut u) = userspace {
        u.finish()?;
        if u.stats.delayed.load(Ordering::Relaxed) == 0 {
            return Err("the userspace netem delayed no packet".into());
        }
    }
    Ok(())
}
