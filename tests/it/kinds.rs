//! Every kind of the registry, through the runner: a small job of each runs on
//! an in-process cluster and its answer equals the kind's direct computation;
//! the sixth kind, queens, equals the published values.

use std::time::Duration;

use crate::support::*;
use tally_kinds as kinds;
use tally_kinds::Control;
use tally_kinds::spec::{JobSpec, ValidSpec};
use tally_wire::proto::{self, JobState};

async fn run_to_answer(
    client: &mut tally_wire::proto::job_service_client::JobServiceClient<tonic::transport::Channel>,
    spec: &ValidSpec,
) -> proto::Job {
    let job = client
        .submit(proto::SubmitRequest {
            spec: Some(spec.into()),
            idempotency_key: String::new(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    let done = wait_finished(client, &job.id, Duration::from_secs(600)).await;
    assert_eq!(
        state(&done),
        JobState::Succeeded,
        "{}: {}",
        job.description,
        done.error
    );
    done
}

/// A coordinator without a data directory whose stage data goes to `store`
/// ("coordinator": its own store), and a client of it.
pub(crate) async fn coordinator_on_store(
    store: &str,
) -> (
    tally_coordinator::RunningCoordinator,
    tally_wire::proto::job_service_client::JobServiceClient<tonic::transport::Channel>,
) {
    let mut config =
        tally_coordinator::CoordinatorConfig::new("127.0.0.1:0".parse().unwrap(), None);
    config.stage_store = store.parse().unwrap();
    let coordinator = tally_coordinator::start(with_sandbox(config))
        .await
        .expect("coordinator starts");
    let client = jobs_client(&coordinator.url()).await;
    (coordinator, client)
}

/// `count` workers of `slots` slots on `coordinator` that spill to `spill`,
/// with `budget` bytes each if given.
fn workers_spilling_to(
    coordinator: &tally_coordinator::RunningCoordinator,
    spill: &std::path::Path,
    count: usize,
    slots: usize,
    budget: Option<u64>,
) -> Workers {
    Workers::start_with(&coordinator.url(), count, slots, |config| {
        config.spill_dir = spill.to_path_buf();
        if let Some(budget) = budget {
            config.memory_budget = budget;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_job_of_every_kind_equals_its_direct_answer() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let workers = Workers::start(&url, 2, 2);
    assert_eq!(kinds::names().len(), kinds::KINDS.len());
    // A kind without a small example (wasm: its jobs need a module and have
    // no direct computation; tests/it/wasm.rs compares its examples with the
    // published counts) is left out.
    for kind in kinds::KINDS {
        let name = kind.name();
        let Some(params) = kind.small_example() else {
            continue;
        };
        let example = JobSpec {
            kind: name.to_string(),
            params: params.unwrap_or_else(|e| panic!("{name}: {e}")),
            options: Default::default(),
        };
        let spec = ValidSpec::new(example).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(spec.kind_name(), name);
        let done = run_to_answer(&mut client, &spec).await;
        let direct = spec.compute_direct(2, &Control::new()).unwrap();
        assert_eq!(done.answer, direct.line, "{name}");
        assert_eq!(done.kind, name);
    }
    workers.stop().await;
    coordinator.shutdown().await;
}

/// The details of the finished job `id`'s answer.
async fn details_of(
    client: &mut tally_wire::proto::job_service_client::JobServiceClient<tonic::transport::Channel>,
    id: &str,
) -> serde_json::Value {
    let result = client
        .result(proto::ResultRequest {
            job_id: id.to_string(),
        })
        .await
        .unwrap()
        .into_inner();
    serde_json::from_str(&result.details_json).unwrap()
}

/// A pegs job with these parameters.
fn pegs_spec(params: serde_json::Value) -> ValidSpec {
    ValidSpec::new(JobSpec {
        kind: "pegs".into(),
        params: params.as_object().expect("an object").clone(),
        options: Default::default(),
    })
    .unwrap()
}

/// A frontier job on a worker with a tiny memory budget, through the
/// coordinator's stage store and through a directory: its shards pass their
/// share and spill sorted runs, their larger inputs are kept in files, the
/// outputs of the shards that spilled are written to files and sent from
/// there, and the count equals the kernel alone's. Pegs levels (and their
/// meeting levels and joins), blocks layers and sliders levels alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frontier_jobs_whose_shards_spill_equal_the_kernel_alone() {
    let klotski = "aXXb\naXXb\ncdde\nc12e\n3..4\nsame: abce\nsame: 1234\n";
    let blocks = ValidSpec::new(JobSpec {
        kind: "blocks".into(),
        params: serde_json::json!({"puzzle": klotski, "plan": "frontier", "buckets": 2})
            .as_object()
            .expect("an object")
            .clone(),
        options: Default::default(),
    })
    .unwrap();
    let sliders = ValidSpec::new(JobSpec {
        kind: "sliders".into(),
        params: serde_json::json!({
            "rows": 4, "cols": 4, "start": "WRRRRRRGRRRRRRRB", "target": "BRRRRRRGRRRRRRRW",
            "base": tally_kernels::sliders::DEFAULT_BASE,
            "modulus": tally_kernels::sliders::DEFAULT_MODULUS,
            "plan": "frontier", "buckets": 2
        })
        .as_object()
        .expect("an object")
        .clone(),
        options: Default::default(),
    })
    .unwrap();
    let pegs = pegs_spec(serde_json::json!({"board": "triangle:6", "start": 4, "buckets": 2}));
    // With a final hole: the meeting level and the join read as streams, one
    // search meeting itself and two meeting each other.
    let met =
        pegs_spec(serde_json::json!({"board": "triangle:6", "start": 4, "end": 4, "buckets": 2}));
    let two =
        pegs_spec(serde_json::json!({"board": "triangle:6", "start": 2, "end": 8, "buckets": 2}));
    for (spec, budget) in [
        (pegs, 256 << 10),
        (met, 64 << 10),
        (two, 64 << 10),
        (blocks, 16 << 10),
        (sliders, 4 << 10),
    ] {
        let name = spec.kind_name().to_string();
        let stage = tempfile::tempdir().unwrap();
        let file_store = format!("file://{}", stage.path().display());
        for store in ["coordinator", file_store.as_str()] {
            let (coordinator, mut client) = coordinator_on_store(store).await;
            let spill = tempfile::tempdir().unwrap();
            let workers = workers_spilling_to(&coordinator, spill.path(), 1, 2, Some(budget));
            let done = run_to_answer(&mut client, &spec).await;
            let direct = spec.compute_direct(2, &Control::new()).unwrap();
            assert_eq!(done.answer, direct.line, "{name} through {store}");
            let stats = workers.stop().await;
            assert_spilled_through_files(&stats, spill.path(), &format!("{name} through {store}"));
            coordinator.shutdown().await;
        }
    }
}

/// The pegs frontier plan without a final hole, asked for them, gives the
/// solutions by final hole. Each equals the count with that final hole by the kernel alone (a
/// depth-first count over a memo, not a search by levels), they add up to
/// the total, and reversing a game (start on `b`, end on `a`) gives the same
/// count, each side found by a forward search of its own. Without the flag,
/// a start whose final holes the parities tell apart gives the same holes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pegs_solutions_by_final_hole_agree_with_the_kernel_and_their_reversals() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let workers = Workers::start(&url, 1, 2);
    let holes = 15;
    let mut by_start = std::collections::BTreeMap::new();
    let mut resolved = 0;
    for start in 1..=holes {
        let params = serde_json::json!({
            "board": "triangle:5", "start": start, "buckets": 2, "by_final_hole": true
        });
        let spec = pegs_spec(params.clone());
        let done = run_to_answer(&mut client, &spec).await;
        let details = details_of(&mut client, &done.id).await;
        let mut finals = vec![0u128; holes + 1];
        if let Some(by_hole) = details["by_final_hole"].as_object() {
            for (hole, count) in by_hole {
                finals[hole.parse::<usize>().unwrap()] = count.as_str().unwrap().parse().unwrap();
            }
        }
        assert_eq!(
            finals.iter().sum::<u128>().to_string(),
            done.answer,
            "from {start}: the holes add up to the total"
        );
        for (end, &found) in finals.iter().enumerate().skip(1) {
            let alone = tally_kernels::pegs::count_solutions(
                tally_kernels::pegs::BoardShape::Triangle(5),
                Some(start as u32),
                Some(end as u32),
                1,
                &Control::new(),
            )
            .unwrap();
            assert_eq!(found, alone.solutions, "{start} -> {end}");
        }
        let levels = details["levels"].as_array().unwrap();
        assert_eq!(levels.len(), holes - 1, "a level per peg count");
        // Without the flag, the search reduced by every symmetry gives the
        // same holes wherever the parities tell them apart, and none elsewhere.
        let mut params = params.clone();
        params["by_final_hole"] = false.into();
        let reduced = pegs_spec(params);
        let done = run_to_answer(&mut client, &reduced).await;
        let details = details_of(&mut client, &done.id).await;
        let game = tally_kernels::pegs::PegGame::new(
            tally_kernels::pegs::BoardShape::Triangle(5),
            Some(start as u32),
            None,
        )
        .unwrap();
        match details["by_final_hole"].as_object() {
            Some(by_hole) => {
                assert!(game.final_classes_resolve(), "from {start}");
                for (end, &found) in finals.iter().enumerate().skip(1) {
                    let given = by_hole.get(&end.to_string()).and_then(|c| c.as_str());
                    assert_eq!(given.unwrap_or("0"), found.to_string(), "{start} -> {end}");
                }
                resolved += 1;
            }
            None => assert!(!game.final_classes_resolve(), "from {start}"),
        }
        by_start.insert(start, finals);
    }
    let mut solvable = 0;
    for a in 1..=holes {
        for b in 1..=holes {
            assert_eq!(by_start[&a][b], by_start[&b][a], "{a} -> {b} and back");
            solvable += usize::from(by_start[&a][b] > 0);
        }
    }
    assert!(solvable > 20, "{solvable} solvable pairs");
    assert!(
        resolved >= 5,
        "{resolved} starts gave their final holes without the flag"
    );
    workers.stop().await;
    coordinator.shutdown().await;
}

/// Pruned and unpruned searches agree through the runner: on every start of
/// the triangle of side `side`, on both plans, the total and (frontier) the
/// solutions by final hole; with `with_ends`, the prefixes plan too and with a
/// final hole (the frontier plan's meeting in the middle, one search or two). The pruned frontier jobs
/// report of each level its positions, those expanded and the children
/// pruned as made; unpruned ones expand and send them all. The jobs of a start are submitted together.
async fn pruned_and_unpruned_pegs_jobs_agree(side: u32, with_ends: bool) {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let workers = Workers::start(&url, 1, 2);
    let shape = tally_kernels::pegs::BoardShape::Triangle(side);
    let ruled_out = |start: u32, end: Option<u32>| {
        tally_kernels::pegs::PegGame::new(shape, Some(start), end)
            .unwrap()
            .ends_ruled_out()
            .is_some()
    };
    let holes = side * (side + 1) / 2;
    let mut pruned_somewhere = false;
    for start in (1..=holes).filter(|&s| !ruled_out(s, None)) {
        let board = format!("triangle:{side}");
        let mut games = vec![serde_json::json!(
            {"board": board, "start": start, "buckets": 2, "by_final_hole": true}
        )];
        // The larger triangle: the frontier plan only (the kernel tests hold
        // the layered count of the prefixes plan on every start).
        if with_ends {
            games.push(serde_json::json!(
                {"board": board, "start": start, "plan": "prefixes", "prefixes": 8}
            ));
            games.push(
                serde_json::json!({"board": board, "start": start, "end": start, "buckets": 2}),
            );
            // An end the classes allow other than the start: two searches.
            if let Some(end) = (1..=holes).find(|&e| e != start && !ruled_out(start, Some(e))) {
                games.push(
                    serde_json::json!({"board": board, "start": start, "end": end, "buckets": 2}),
                );
            }
        }
        let mut submitted = Vec::new();
        for params in &games {
            for no_prune in [false, true] {
                let mut params = params.clone();
                params["no_prune"] = no_prune.into();
                let job = client
                    .submit(proto::SubmitRequest {
                        spec: Some((&pegs_spec(params.clone())).into()),
                        idempotency_key: String::new(),
                        ..Default::default()
                    })
                    .await
                    .unwrap()
                    .into_inner()
                    .job
                    .unwrap();
                submitted.push((params, job.id));
            }
        }
        let mut answers = Vec::new();
        for (params, id) in submitted {
            let done = wait_finished(&mut client, &id, Duration::from_secs(600)).await;
            assert_eq!(
                state(&done),
                JobState::Succeeded,
                "{params}: {}",
                done.error
            );
            let details = details_of(&mut client, &id).await;
            if let (Some(levels), Some(expanded)) =
                (details["levels"].as_array(), details["expanded"].as_array())
            {
                assert_eq!(levels.len(), expanded.len(), "{params}");
                for (n, e) in levels.iter().zip(expanded) {
                    let (n, e) = (n.as_u64().unwrap(), e.as_u64().unwrap());
                    assert!(e <= n, "{params}");
                    pruned_somewhere |= e < n;
                    // A join level is joined, not expanded (0).
                    assert!(params["no_prune"] == false || e == n || e == 0, "{params}");
                }
            }
            // Children that cannot finish are pruned as they are made.
            let sent_pruned = ["pruned_when_sent", "pruned_when_sent_from_the_end"]
                .iter()
                .filter_map(|key| details[*key].as_array())
                .flatten()
                .map(|n| n.as_u64().unwrap())
                .sum::<u64>();
            assert!(params["no_prune"] == false || sent_pruned == 0, "{params}");
            pruned_somewhere |= sent_pruned > 0;
            answers.push((params, done.answer, details["by_final_hole"].clone()));
        }
        for pair in answers.chunks(2) {
            let ((params, pruned, by_hole), (_, plain, plain_by_hole)) = (&pair[0], &pair[1]);
            assert_eq!(pruned, plain, "{params}: pruned and unpruned");
            assert_eq!(by_hole, plain_by_hole, "{params}: by final hole");
        }
    }
    assert!(pruned_somewhere, "the searches on triangle:{side} prune");
    workers.stop().await;
    coordinator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruned_and_unpruned_pegs_jobs_agree_on_every_start_of_triangle_5() {
    pruned_and_unpruned_pegs_jobs_agree(5, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruned_and_unpruned_pegs_jobs_agree_on_every_start_of_triangle_6() {
    pruned_and_unpruned_pegs_jobs_agree(6, false).await;
}

/// A start from which the position classes rule out every allowed end (the
/// French and diamond boards from their centres, the default; a pair of holes
/// of the triangle whose classes differ) answers 0 at planning on every plan:
/// one shard of the start alone, no position searched, the reason in the
/// job's details; the kernel's direct count agrees, and a start they allow
/// gives no such reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_the_position_classes_rule_out_answer_zero_at_planning() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let workers = Workers::start(&url, 1, 2);
    // The triangle's ends from hole 1 that its classes rule out, and those
    // they allow.
    let triangle = tally_kernels::pegs::BoardShape::Triangle(5);
    let (out, allowed): (Vec<u32>, Vec<u32>) = (1..=15).partition(|&end| {
        tally_kernels::pegs::PegGame::new(triangle, Some(1), Some(end))
            .unwrap()
            .ends_ruled_out()
            .is_some()
    });
    assert!(
        !out.is_empty() && !allowed.is_empty(),
        "{out:?} {allowed:?}"
    );
    let ruled_out = [
        serde_json::json!({"board": "french"}),
        serde_json::json!({"board": "diamond"}),
        serde_json::json!({"board": "triangle:5", "start": 1, "end": out[0]}),
    ];
    for game in ruled_out {
        for plan in ["frontier", "prefixes"] {
            let mut params = game.clone();
            params["plan"] = plan.into();
            let spec = pegs_spec(params.clone());
            let done = run_to_answer(&mut client, &spec).await;
            assert_eq!(done.answer, "0", "{params}");
            assert_eq!(done.shards_total, 1, "{params}: the start alone");
            let details = details_of(&mut client, &done.id).await;
            let why = details["ruled_out"].as_str().unwrap_or_default();
            assert!(why.contains("position class"), "{params}: {details}");
            assert_eq!(details["positions"], 0, "{params}: nothing searched");
            let direct = spec.compute_direct(1, &Control::new()).unwrap();
            assert_eq!(direct.line, "0", "{params}");
            assert_eq!(direct.details["ruled_out"].as_str(), Some(why), "{params}");
        }
    }
    // The classes allow this start: it is searched, and no reason is given.
    let allowed =
        pegs_spec(serde_json::json!({"board": "triangle:5", "start": 1, "end": allowed[0]}));
    let done = run_to_answer(&mut client, &allowed).await;
    assert_eq!(done.answer, direct_answer(allowed.spec()));
    let details = details_of(&mut client, &done.id).await;
    assert!(details.get("ruled_out").is_none(), "{details}");
    workers.stop().await;
    coordinator.shutdown().await;
}

/// OEIS A000170, n = 1..=12.
const QUEENS: [u64; 12] = [1, 0, 0, 2, 10, 4, 40, 92, 352, 724, 2680, 14200];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queens_through_the_runner_gives_the_published_counts() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let workers = Workers::start(&url, 2, 2);
    for (n, expected) in (1..).zip(QUEENS) {
        let spec = JobSpec::from_json(&format!(r#"{{"kind": "queens", "n": {n}}}"#)).unwrap();
        let done = run_to_answer(&mut client, &spec).await;
        assert_eq!(done.answer, expected.to_string(), "n = {n}");
        assert!(done.shards_total >= 1);
        if n >= 8 {
            assert!(done.shards_total > 1, "n = {n} is split into shards");
        }
    }
    workers.stop().await;
    coordinator.shutdown().await;
}

#[test]
fn queens_specs_are_checked_at_the_edge() {
    for bad in [0, tally_kernels::queens::MAX_N + 1] {
        let err = JobSpec::from_json(&format!(r#"{{"kind": "queens", "n": {bad}}}"#)).unwrap_err();
        assert!(err.to_string().contains("n must be between 1 and"), "{err}");
    }
    let err = JobSpec::from_json(r#"{"kind": "queens", "n": 8, "rows": 2}"#).unwrap_err();
    assert!(err.to_string().contains("unknown field"), "{err}");
    let err = JobSpec::from_json(r#"{"kind": "rooks", "n": 8}"#).unwrap_err();
    assert!(err.to_string().contains("unknown job kind"), "{err}");
    // The proto form round-trips.
    let spec = JobSpec::from_json(r#"{"kind": "queens", "n": 18}"#).unwrap();
    let wire = proto::JobSpec::from(&spec);
    assert_eq!(ValidSpec::try_from(&wire).unwrap(), spec);
}

/// The hex points plan with its graph as stage data (built in one part or
/// three, opened by the point shards from the stage's outputs, which their
/// workers keep in files) gives the answers of
/// a graph in memory (the sweep's count, or for an exact count every point
/// on the graph in memory), through the coordinator's own store and through
/// a shared directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hex_with_its_graph_as_stage_data_gives_the_answers_of_the_graph_in_memory() {
    let stage = tempfile::tempdir().unwrap();
    let file_store = format!("file://{}", stage.path().display());
    for store in ["coordinator", file_store.as_str()] {
        let (coordinator, mut client) = coordinator_on_store(store).await;
        let spill = tempfile::tempdir().unwrap();
        let workers = workers_spilling_to(&coordinator, spill.path(), 2, 1, None);
        for (side, exact) in [(1, false), (2, true), (5, false), (7, true), (9, false)] {
            let spec = |graph: kinds::hex::HexGraphPlace, graph_parts: u32| {
                valid(&JobSpec::new(kinds::hex::HexSpec {
                    side,
                    modulus: 1_000_000_007,
                    plan: kinds::hex::HexPlan::Points,
                    shards_per_step: 0,
                    exact,
                    points_per_shard: 0,
                    graph,
                    graph_parts,
                }))
            };
            let in_memory = spec(kinds::hex::HexGraphPlace::Worker, 0);
            let direct = in_memory.compute_direct(2, &Control::new()).unwrap();
            // The parts the coordinator chooses (one, at these sides), and
            // three (as many as the side's groups allow).
            let most = tally_kernels::hex::max_graph_parts(side);
            let mut shards = Vec::new();
            for parts in [0, 3.min(most)] {
                let staged = spec(kinds::hex::HexGraphPlace::Stage, parts);
                let done = run_to_answer(&mut client, &staged).await;
                assert!(
                    done.description.contains("graph as stage data") && done.stages_total == 2,
                    "{done:?}"
                );
                assert_eq!(
                    done.answer, direct.line,
                    "side {side}, {parts} parts, through {store}"
                );
                shards.push(done.shards_total);
            }
            // One build shard a part.
            assert_eq!(
                shards[1] - shards[0],
                u64::from(3.min(most) - 1),
                "side {side}"
            );
        }
        // The workers kept the graphs in files, however small, and removed
        // them.
        let stats = workers.stop().await;
        let in_files: u64 = stats.iter().map(|s| s.input_in_files_bytes.get()).sum();
        assert!(
            in_files > 0,
            "the graphs were kept in files, through {store}"
        );
        let left: Vec<_> = std::fs::read_dir(spill.path()).unwrap().collect();
        assert!(left.is_empty(), "the spill is removed: {left:?}");
        coordinator.shutdown().await;
    }
}
