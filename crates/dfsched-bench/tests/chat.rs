//! Runs tiny Chat benchmarks and checks what ran: every mode this build
//! supports completes (so every message reached its 19 receivers exactly
//! once, in order: a run fails otherwise), the counts and the JSON shape
//! are as documented, and pinned modes held their pins. No timing is
//! asserted.

use dfsched_bench::chat::ChatError;
use dfsched_bench::chat::{run_chat_cases, ChatMode, ChatParamError, ChatParams};

fn tiny(rooms: usize, modes: Vec<ChatMode>) -> ChatParams {
    ChatParams {
        rooms,
        messages: 7,
        repeat: 1,
        modes,
        ..ChatParams::default()
    }
}

#[test]
fn every_available_mode_delivers_every_message_exactly_once() {
    let modes = ChatMode::available();
    let mut seen = Vec::new();
    let reports = run_chat_cases(&[tiny(2, modes.clone())], &mut |p| seen.push(p.mode)).unwrap();
    assert_eq!(seen.len(), modes.len(), "one progress report per run");
    let r = &reports[0];
    // 2 rooms × 20 users × 19 receivers × 7 messages.
    assert_eq!(r.messages_delivered, 2 * 20 * 19 * 7);
    assert_eq!(r.messages_transmitted, 2 * 20 * 20 * 7);
    for m in &modes {
        let mr = &r.modes[m];
        assert_eq!(mr.runs.len(), 1);
        let run = &mr.runs[0];
        assert_eq!(run.messages_delivered, r.messages_delivered);
        assert!(run.time_s > 0.0);
        let want = run.messages_delivered as f64 / run.time_s;
        assert!((run.throughput_msgs_per_s - want).abs() <= 1e-6 * want);
        assert_eq!(run.pin_mismatches, 0, "{m}: pins did not hold");
        if m.needs_runtime() {
            let stats = run.runtime_stats.as_ref().expect("runtime stats");
            let attached = stats["threads_attached"].as_u64().unwrap();
            // co-thread attaches all 2 × 80 threads; dfsched only hints.
            let want = if *m == ChatMode::CoThread { 160 } else { 0 };
            assert_eq!(attached, want, "{m}: {stats}");
        }
    }
    let v = serde_json::to_value(r).unwrap();
    for m in &modes {
        let mv = &v["modes"][m.as_str()];
        for key in ["median", "min", "max", "std_dev"] {
            assert!(mv["time_s"][key].is_number(), "{m}.time_s.{key}");
            assert!(mv["throughput_msgs_per_s"][key].is_number());
        }
        assert_eq!(mv["runs_s"].as_array().unwrap().len(), 1);
    }
    for key in [
        "dfsched_vs_vanilla",
        "co_thread_vs_vanilla",
        "oracle_vs_vanilla",
        "split_vs_vanilla",
        "dfsched_vs_oracle",
    ] {
        assert!(v["ratios"].get(key).is_some(), "ratios.{key}");
    }
    assert!(v["ratios"]["split_vs_vanilla"].is_number());
}

#[test]
fn repeated_rounds_run_each_mode_each_round() {
    let p = ChatParams {
        repeat: 2,
        ..tiny(1, vec![ChatMode::Vanilla, ChatMode::Oracle])
    };
    let reports = run_chat_cases(&[p], &mut |_| {}).unwrap();
    for m in [ChatMode::Vanilla, ChatMode::Oracle] {
        let rounds: Vec<usize> = reports[0].modes[&m].runs.iter().map(|r| r.round).collect();
        assert_eq!(rounds, vec![0, 1], "{m}");
    }
}

#[test]
fn bad_params_run_nothing() {
    let mut ran = 0;
    let err = run_chat_cases(&[tiny(0, vec![ChatMode::Vanilla])], &mut |_| ran += 1).unwrap_err();
    assert!(matches!(err, ChatError::Params(ChatParamError::Rooms(0))));
    assert!(err.is_usage());
    assert_eq!(ran, 0);
}
