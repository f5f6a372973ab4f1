//! Round trips of the format (proptest) and refusals of bad bytes.

use super::*;
use proptest::prelude::*;

/// Optional switch counts (each below `u64::MAX`: written as value + 1).
fn counts() -> impl Strategy<Value = (Option<u64>, Option<u64>)> {
    (
        proptest::option::of(0..u64::MAX),
        proptest::option::of(0..u64::MAX),
    )
}

fn header() -> Header {
    Header {
        pid: 1234,
        cpus: 2,
        start_unix_ns: 1_700_000_000_000_000_000,
        policy: Policy::CoThread,
        balance_interval_ms: 100,
    }
}

fn any_cpu() -> impl Strategy<Value = Option<u32>> {
    prop_oneof![
        Just(None),
        any::<u32>().prop_map(|c| Some(c.min(u32::MAX - 1)))
    ]
}

fn any_event() -> impl Strategy<Value = Event> {
    let t = any::<u64>();
    prop_oneof![
        (
            t,
            any::<u64>(),
            any::<u64>(),
            any_cpu(),
            any::<u64>(),
            (any::<u64>(), counts())
        )
            .prop_map(
                |(t_ns, tid, app, cpu, cpu_ns, (wait_ns, (runs, voluntary)))| Event::ThreadNew {
                    t_ns,
                    tid,
                    app,
                    cpu,
                    cpu_ns,
                    wait_ns,
                    runs,
                    voluntary
                }
            ),
        (t, any::<u64>(), any::<u64>(), any::<u64>(), counts()).prop_map(
            |(t_ns, tid, cpu_ns, wait_ns, (runs, voluntary))| {
                Event::ThreadExit {
                    t_ns,
                    tid,
                    cpu_ns,
                    wait_ns,
                    runs,
                    voluntary,
                }
            }
        ),
        (
            t,
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(|(t_ns, tid, app, cur, next, cpu_ns)| Event::Hint {
                t_ns,
                tid,
                app,
                cur,
                next,
                cpu_ns
            }),
        (t, any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(t_ns, app, df, bytes)| {
            Event::DfSize {
                t_ns,
                app,
                df,
                bytes,
            }
        }),
        (t, any::<u64>()).prop_map(|(t_ns, tid)| Event::Block { t_ns, tid }),
        (t, any::<u64>()).prop_map(|(t_ns, tid)| Event::Wake { t_ns, tid }),
        (
            t,
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any_cpu(),
            counts()
        )
            .prop_map(|(t_ns, tid, cpu_ns, wait_ns, cpu, (runs, voluntary))| {
                Event::Sample {
                    t_ns,
                    tid,
                    cpu_ns,
                    wait_ns,
                    cpu,
                    runs,
                    voluntary,
                }
            }),
        (
            t,
            any::<u64>(),
            proptest::collection::btree_set(0u32..5000, 0..40)
        )
            .prop_map(|(t_ns, set, home)| Event::Sharing {
                t_ns,
                set,
                home: home.into_iter().collect()
            }),
        (t, any::<u64>()).prop_map(|(t_ns, dropped)| Event::Drops { t_ns, dropped }),
        (
            t,
            proptest::collection::vec((any::<u32>(), any::<u64>()), 0..8)
        )
            .prop_map(|(t_ns, per_cpu)| Event::OutsideLoad { t_ns, per_cpu }),
    ]
}

fn encode_all(h: &Header, evs: &[Event]) -> Vec<u8> {
    let mut b = Vec::new();
    encode_header(h, &mut b);
    let mut e = Encoder::default();
    for ev in evs {
        e.event(ev, &mut b);
    }
    b
}

proptest! {
    #[test]
    fn every_event_sequence_decodes_to_itself(
        evs in proptest::collection::vec(any_event(), 0..60),
        dropped in any::<u64>(),
    ) {
        let mut all = evs.clone();
        all.push(Event::End { t_ns: 7, events: evs.len() as u64, dropped });
        let rec = decode(&encode_all(&header(), &all)).unwrap();
        prop_assert_eq!(&rec.header, &header());
        prop_assert_eq!(&rec.events, &all);
        prop_assert!(rec.complete && !rec.truncated);
        let most = evs.iter().filter_map(|e| match e {
            Event::Drops { dropped, .. } => Some(*dropped),
            _ => None,
        }).max().unwrap_or(0).max(dropped);
        prop_assert_eq!(rec.dropped, most);
    }

    #[test]
    fn a_recording_cut_anywhere_keeps_the_whole_records_before_the_cut(
        evs in proptest::collection::vec(any_event(), 1..30),
        cut in any::<prop::sample::Index>(),
    ) {
        let bytes = encode_all(&header(), &evs);
        let at = HEADER_BYTES + cut.index(bytes.len() - HEADER_BYTES);
        let rec = decode(&bytes[..at]).unwrap();
        prop_assert!(!rec.complete);
        prop_assert!(rec.events.len() <= evs.len());
        prop_assert_eq!(&rec.events[..], &evs[..rec.events.len()]);
    }
}

#[test]
fn bad_magic_version_and_short_files_are_refused_by_name() {
    let good = encode_all(&header(), &[]);
    assert_eq!(decode(&good[..10]), Err(DecodeError::Short(10)));
    let mut b = good.clone();
    b[0] = b'X';
    assert_eq!(decode(&b), Err(DecodeError::Magic));
    let mut b = good.clone();
    b[8] = 9;
    assert_eq!(decode(&b), Err(DecodeError::Version(9)));
    let mut b = good;
    b[32] = 7;
    assert_eq!(decode(&b), Err(DecodeError::Policy(7)));
}

#[test]
fn unknown_kinds_are_skipped_and_counted() {
    let mut b = encode_all(&header(), &[Event::Block { t_ns: 5, tid: 1 }]);
    // kind 77, 2 bytes of payload.
    b.extend_from_slice(&[77, 2, 0, 0]);
    Encoder::default().event(&Event::Wake { t_ns: 0, tid: 1 }, &mut b);
    let rec = decode(&b).unwrap();
    assert_eq!(rec.unknown_records, 1);
    assert_eq!(rec.events.len(), 2);
}

#[test]
fn the_header_is_forty_bytes_in_the_documented_layout() {
    let b = encode_all(&header(), &[]);
    assert_eq!(b.len(), HEADER_BYTES);
    assert_eq!(&b[..8], b"DFSCHREC");
    assert_eq!(&b[8..12], &1u32.to_le_bytes());
    assert_eq!(&b[12..16], &40u32.to_le_bytes());
    assert_eq!(&b[16..20], &1234u32.to_le_bytes());
    assert_eq!(b[32], 1);
    assert_eq!(&b[36..40], &100u32.to_le_bytes());
}

#[test]
fn a_summary_counts_threads_dfs_and_the_run_span() {
    let evs = vec![
        Event::ThreadNew {
            t_ns: 10,
            tid: 1,
            app: 0,
            cpu: Some(0),
            cpu_ns: 0,
            wait_ns: 0,
            runs: Some(2),
            voluntary: None,
        },
        Event::Hint {
            t_ns: 10,
            tid: 1,
            app: 0,
            cur: 0,
            next: 3,
            cpu_ns: 5,
        },
        Event::DfSize {
            t_ns: 11,
            app: 0,
            df: 3,
            bytes: 4096,
        },
        Event::Sample {
            t_ns: 50,
            tid: 1,
            cpu_ns: 40,
            wait_ns: 0,
            cpu: Some(1),
            runs: Some(30),
            voluntary: Some(4),
        },
        Event::ThreadExit {
            t_ns: 90,
            tid: 1,
            cpu_ns: 70,
            wait_ns: 3,
            runs: Some(42),
            voluntary: Some(10),
        },
        Event::End {
            t_ns: 95,
            events: 5,
            dropped: 2,
        },
    ];
    let s = decode(&encode_all(&header(), &evs)).unwrap().summary();
    assert_eq!(s.threads.len(), 1);
    assert_eq!(s.threads[0].cpu_ns, 70);
    assert_eq!(s.threads[0].wait_ns, 3);
    assert_eq!(s.threads[0].runs, Some(40), "run periods: last less first");
    assert_eq!(
        s.threads[0].voluntary,
        Some(6),
        "from the first reading (4)"
    );
    assert_eq!(s.threads[0].cpus, vec![0, 1]);
    assert_eq!(s.dfs, 1);
    assert_eq!(s.df_sizes, vec![(0, 3, 4096)]);
    assert_eq!(s.run_ns, 80);
    assert_eq!(s.dropped, 2);
    assert_eq!(s.events["hint"], 1);
}

#[test]
fn records_without_run_periods_as_older_builds_wrote_them_decode_with_none() {
    // A version-1 sample, thread_new and thread_exit as written before the
    // trailing run-period field existed: exactly their old fields.
    let mut b = Vec::new();
    encode_header(&header(), &mut b);
    let mut payload = |kind: u8, fields: &[u64]| {
        let mut p = Vec::new();
        crate::varint::put(&mut p, 0); // dt
        for &f in fields {
            crate::varint::put(&mut p, f);
        }
        b.push(kind);
        crate::varint::put(&mut b, p.len() as u64);
        b.extend_from_slice(&p);
    };
    payload(1, &[7, 0, 1, 100, 5]);
    payload(7, &[7, 200, 6, 1]);
    payload(2, &[7, 300, 9]);
    let rec = decode(&b).unwrap();
    assert_eq!(rec.events.len(), 3);
    for ev in &rec.events {
        match ev {
            Event::ThreadNew {
                runs, voluntary, ..
            }
            | Event::Sample {
                runs, voluntary, ..
            }
            | Event::ThreadExit {
                runs, voluntary, ..
            } => assert_eq!((*runs, *voluntary), (None, None), "{ev:?}"),
            _ => unreachable!(),
        }
    }
    assert_eq!(rec.summary().threads[0].runs, None);
    // And new records keep the fields through a round trip, each known or
    // not on its own.
    for (runs, voluntary) in [(Some(0), None), (None, Some(0)), (Some(5), Some(3))] {
        let ev = Event::Sample {
            t_ns: 1,
            tid: 7,
            cpu_ns: 2,
            wait_ns: 3,
            cpu: None,
            runs,
            voluntary,
        };
        let back = decode(&encode_all(&header(), std::slice::from_ref(&ev))).unwrap();
        assert_eq!(back.events, vec![ev], "Some(0) is not None");
    }
}
