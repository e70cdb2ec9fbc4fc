//! The sandbox against hand-written modules: an honest one, and a table of
//! malicious ones (trap, endless loop, memory bomb, forbidden import, wrong
//! output length, residue out of range, oversized module), each refused or
//! failed with its own clear error, the sandbox still running others after.

use super::*;

/// A module speaking the ABI whose `tally_shard` body is `body` (locals:
/// 0 shard, 1 shards, 2 prime, 3 params, 4 params_len, 5 state, 6 state_len,
/// 7 out, 8 out_len), with `extra` declarations (imports first).
fn module(imports: &str, body: &str, extra: &str) -> Vec<u8> {
    module_of_version("(i32.const 1)", imports, body, extra)
}

/// [`module`] whose `tally_abi_version` body is `version`.
fn module_of_version(version: &str, imports: &str, body: &str, extra: &str) -> Vec<u8> {
    let text = format!(
        r#"(module
          {imports}
          (memory (export "memory") 1)
          (global $next (mut i32) (i32.const 1024))
          (func (export "tally_abi_version") (result i32) {version})
          (func (export "tally_alloc") (param $len i32) (result i32)
            (local $at i32)
            (local.set $at (global.get $next))
            (global.set $next (i32.add (global.get $next) (i32.add (local.get $len) (i32.const 8))))
            (local.get $at))
          (func (export "tally_shard")
            (param i64 i64 i64 i32 i32 i32 i32 i32 i32) (result i32)
            {body})
          {extra})"#
    );
    wat::parse_str(text).expect("the test module assembles")
}

/// out[0] = (shard + 1) * 10 + params_len + state_len, mod prime; returns 1.
fn honest() -> Vec<u8> {
    module(
        "",
        "(i64.store (local.get 7)
           (i64.rem_u
             (i64.add
               (i64.mul (i64.add (local.get 0) (i64.const 1)) (i64.const 10))
               (i64.extend_i32_u (i32.add (local.get 4) (local.get 6))))
             (local.get 2)))
         (i32.const 1)",
        "",
    )
}

struct Recorded {
    progress: Vec<(u64, u64)>,
    checkpoints: Vec<Vec<u8>>,
    cancel_after_polls: Option<usize>,
    polls: std::cell::Cell<usize>,
}

impl Recorded {
    fn new() -> Recorded {
        Recorded {
            progress: Vec::new(),
            checkpoints: Vec::new(),
            cancel_after_polls: None,
            polls: std::cell::Cell::new(0),
        }
    }
}

impl Hooks for Recorded {
    fn progress(&mut self, done: u64, total: u64) {
        self.progress.push((done, total));
    }
    fn checkpoint(&mut self, state: &[u8]) {
        self.checkpoints.push(state.to_vec());
    }
    fn cancelled(&self) -> bool {
        self.polls.set(self.polls.get() + 1);
        self.cancel_after_polls
            .is_some_and(|n| self.polls.get() > n)
    }
}

fn call(outputs: u32) -> ShardCall<'static> {
    ShardCall {
        shard: 4,
        shards: 9,
        prime: 1_000_000_007,
        params: "n=8\n",
        state: b"",
        outputs,
    }
}

fn small_limits() -> Limits {
    Limits {
        module_bytes: 64 * 1024,
        memory_bytes: 4 << 20,
        fuel: 50_000_000,
        checkpoint_bytes: 1024,
    }
}

#[test]
fn an_honest_module_computes_its_shard_the_same_every_time() {
    let sandbox = Sandbox::new(small_limits()).unwrap();
    let kernel = sandbox.load(&honest()).unwrap();
    for _ in 0..3 {
        let got = sandbox
            .run(&kernel, &call(1), &mut Recorded::new())
            .unwrap();
        assert_eq!(got, vec![5 * 10 + 4]);
    }
    let resumed = ShardCall {
        state: b"abc",
        ..call(1)
    };
    assert_eq!(
        sandbox
            .run(&kernel, &resumed, &mut Recorded::new())
            .unwrap(),
        vec![57]
    );
}

#[test]
fn progress_and_checkpoints_reach_the_caller() {
    let imports = r#"(import "tally" "progress" (func $progress (param i64 i64)))
                     (import "tally" "checkpoint" (func $checkpoint (param i32 i32)))
                     (import "tally" "cancelled" (func $cancelled (result i32)))"#;
    let body = r#"(call $progress (i64.const 1) (i64.const 2))
                  (i32.store (i32.const 64) (i32.const 0x64636261))
                  (call $checkpoint (i32.const 64) (i32.const 4))
                  (call $progress (i64.const 2) (i64.const 2))
                  (i64.store (local.get 7) (i64.const 7))
                  (i32.const 1)"#;
    let sandbox = Sandbox::new(small_limits()).unwrap();
    let kernel = sandbox.load(&module(imports, body, "")).unwrap();
    let mut hooks = Recorded::new();
    assert_eq!(sandbox.run(&kernel, &call(1), &mut hooks).unwrap(), vec![7]);
    assert_eq!(hooks.progress, vec![(1, 2), (2, 2)]);
    assert_eq!(hooks.checkpoints, vec![b"abcd".to_vec()]);
}

/// A module that says why before it refuses or fails (`tally.say`) has
/// its line in the error, one line of at most `MAX_SAID_BYTES`; one that
/// says nothing still fails with the code's reason.
#[test]
fn what_a_module_says_before_it_fails_is_in_its_error() {
    let imports = r#"(import "tally" "say" (func $say (param i32 i32)))"#;
    let saying = |text: &str, code: i32| {
        let stores: String = text
            .bytes()
            .enumerate()
            .map(|(i, b)| format!("(i32.store8 (i32.const {}) (i32.const {b}))", 64 + i))
            .collect();
        let body = format!(
            "{stores} (call $say (i32.const 64) (i32.const {})) (i32.const {code})",
            text.len()
        );
        module(imports, &body, "")
    };
    let sandbox = Sandbox::new(small_limits()).unwrap();
    let run = |bytes: &[u8]| {
        let kernel = sandbox.load(bytes).unwrap();
        sandbox
            .run(&kernel, &call(1), &mut Recorded::new())
            .unwrap_err()
    };
    let refused = run(&saying("n is 40:\nat most 30", -1));
    assert_eq!(refused, WasmError::BadParams("n is 40: at most 30".into()));
    assert_eq!(
        refused.to_string(),
        "the module refused the parameters: n is 40: at most 30"
    );
    let failed = run(&saying("no table for n", -2));
    assert_eq!(
        failed.to_string(),
        "the shard failed: the module said it failed: no table for n"
    );
    let long = "x".repeat(crate::MAX_SAID_BYTES + 100);
    match run(&saying(&long, -1)) {
        WasmError::BadParams(said) => assert_eq!(said.len(), crate::MAX_SAID_BYTES),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        run(&module("", "(i32.const -2)", "")).to_string(),
        "the shard failed: the module said it failed"
    );
}

#[test]
fn a_long_shard_stops_when_its_caller_cancels() {
    let sandbox = Sandbox::new(Limits {
        fuel: u64::MAX / 2,
        ..small_limits()
    })
    .unwrap();
    let kernel = sandbox
        .load(&module("", "(loop (br 0)) (i32.const 1)", ""))
        .unwrap();
    let mut hooks = Recorded::new();
    hooks.cancel_after_polls = Some(3);
    assert_eq!(
        sandbox.run(&kernel, &call(1), &mut hooks),
        Err(WasmError::Cancelled)
    );
}

#[test]
fn a_module_that_answers_its_cancellation_with_minus_3_is_cancelled() {
    let sandbox = Sandbox::new(Limits {
        fuel: u64::MAX / 2,
        ..small_limits()
    })
    .unwrap();
    let polite = module(
        r#"(import "tally" "cancelled" (func $cancelled (result i32)))"#,
        "(loop (br_if 0 (i32.eqz (call $cancelled)))) (i32.const -3)",
        "",
    );
    let kernel = sandbox.load(&polite).unwrap();
    let mut hooks = Recorded::new();
    hooks.cancel_after_polls = Some(3);
    assert_eq!(
        sandbox.run(&kernel, &call(1), &mut hooks),
        Err(WasmError::Cancelled)
    );
}

/// Each malicious module gets its own error, and the sandbox runs an honest
/// module after every one of them.
#[test]
fn malicious_modules_fail_with_a_clear_error_and_affect_nothing_else() {
    let limits = small_limits();
    let sandbox = Sandbox::new(limits).unwrap();
    let store_one = "(i64.store (local.get 7) (i64.const 1))";
    let bomb =
        "(loop (br_if 0 (i32.ne (memory.grow (i32.const 16)) (i32.const -1)))) (i32.const 1)";
    let oversized = module(
        "",
        "(i32.const 1)",
        &format!("(data (i32.const 4096) \"{}\")", "x".repeat(70_000)),
    );
    type Case = (&'static str, Vec<u8>, fn(&WasmError) -> bool, &'static str);
    let cases: Vec<Case> = vec![
        (
            "trap",
            module("", "unreachable", ""),
            |e| matches!(e, WasmError::Trap(_)),
            "trapped",
        ),
        (
            "endless loop",
            module("", "(loop (br 0)) (i32.const 1)", ""),
            |e| matches!(e, WasmError::OutOfFuel(_)),
            "fuel",
        ),
        (
            "memory bomb",
            module("", bomb, ""),
            |e| matches!(e, WasmError::MemoryLimit(_)),
            "memory limit",
        ),
        (
            "forbidden import",
            module(
                r#"(import "env" "clock_time" (func (result i64)))"#,
                "(i32.const 1)",
                "",
            ),
            |e| matches!(e, WasmError::Refused(_)),
            "env.clock_time",
        ),
        (
            "import of the wrong type",
            module(
                r#"(import "tally" "progress" (func (param i32)))"#,
                "(i32.const 1)",
                "",
            ),
            |e| matches!(e, WasmError::Refused(_)),
            "another type",
        ),
        (
            "wrong output length",
            module("", &format!("{store_one} (i32.const 2)"), ""),
            |e| matches!(e, WasmError::WrongOutputs { got: 2, want: 1 }),
            "returned 2 residues",
        ),
        (
            "residue not below the prime",
            module(
                "",
                "(i64.store (local.get 7) (local.get 2)) (i32.const 1)",
                "",
            ),
            |e| matches!(e, WasmError::ResidueOutOfRange { .. }),
            "not below the prime",
        ),
        (
            "oversized checkpoint",
            module(
                r#"(import "tally" "checkpoint" (func $c (param i32 i32)))"#,
                "(call $c (i32.const 0) (i32.const 4096)) (i32.const 1)",
                "",
            ),
            |e| matches!(e, WasmError::CheckpointTooLarge(4096)),
            "checkpoint",
        ),
        (
            "oversized module",
            oversized,
            |e| matches!(e, WasmError::Refused(_)),
            "above the limit",
        ),
        (
            "not wasm",
            b"\0asm but not really".to_vec(),
            |e| matches!(e, WasmError::Refused(_)),
            "not a valid module",
        ),
        (
            "no shard export",
            wat::parse_str(r#"(module (memory (export "memory") 1))"#).unwrap(),
            |e| matches!(e, WasmError::Refused(_)),
            "tally_abi_version",
        ),
        (
            "cancelled though nothing cancelled it",
            module("", "(i32.const -3)", ""),
            |e| *e == WasmError::CancelledUnasked,
            "was not cancelled",
        ),
        (
            "bad parameters",
            module("", "(i32.const -1)", ""),
            |e| *e == WasmError::BadParams(String::new()),
            "parameters",
        ),
    ];
    let honest = sandbox.load(&honest()).unwrap();
    for (name, bytes, expected, needle) in cases {
        let result = sandbox
            .load(&bytes)
            .and_then(|kernel| sandbox.run(&kernel, &call(1), &mut Recorded::new()));
        let err = result.expect_err(name);
        assert!(expected(&err), "{name}: {err:?}");
        assert!(err.to_string().contains(needle), "{name}: {err}");
        assert_eq!(
            sandbox
                .run(&honest, &call(1), &mut Recorded::new())
                .unwrap(),
            vec![54],
            "after {name}"
        );
    }
}

/// A checkpoint state outside the module's memory fails the shard with one
/// line naming it, not wasmtime's multi-line backtrace.
#[test]
fn a_checkpoint_outside_memory_fails_with_one_line() {
    let sandbox = Sandbox::new(small_limits()).unwrap();
    let kernel = sandbox
        .load(&module(
            r#"(import "tally" "checkpoint" (func $c (param i32 i32)))"#,
            "(call $c (i32.const 0x7fff0000) (i32.const 16)) (i32.const 1)",
            "",
        ))
        .unwrap();
    let err = sandbox
        .run(&kernel, &call(1), &mut Recorded::new())
        .unwrap_err();
    let line = err.to_string();
    assert!(matches!(err, WasmError::Trap(_)), "{err:?}");
    assert!(!line.contains('\n'), "one line: {line}");
    assert!(!line.contains("backtrace"), "{line}");
    assert!(line.contains("checkpoint"), "{line}");
}

/// A module of another ABI version is refused when it is loaded (at
/// submission), naming both versions, not at its first shard.
#[test]
fn a_module_of_another_abi_version_is_refused_at_load() {
    let sandbox = Sandbox::new(small_limits()).unwrap();
    let abi_2 = module_of_version("(i32.const 2)", "", "(i32.const 1)", "");
    let err = sandbox
        .load(&abi_2)
        .err()
        .expect("an ABI-2 module is refused");
    let line = err.to_string();
    assert!(matches!(err, WasmError::Refused(_)), "{err:?}");
    assert!(
        line.contains("ABI version 2") && line.contains("version 1"),
        "{line}"
    );
    // A version export that never ends is refused within the check's fuel.
    let looping = module_of_version("(loop (br 0)) (i32.const 1)", "", "(i32.const 1)", "");
    let err = sandbox
        .load(&looping)
        .err()
        .expect("a looping version export is refused");
    assert!(matches!(err, WasmError::Refused(_)), "{err:?}");
    assert!(err.to_string().contains("tally_abi_version"), "{err}");
    assert!(sandbox.load(&honest()).is_ok());
}
