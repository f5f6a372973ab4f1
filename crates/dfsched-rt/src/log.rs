//! The runtime's own log (`DFSCHED_LOG=error|warn|info|debug|trace`): its
//! `tracing` events, one line each on stderr, for programs that have no
//! subscriber of their own (a C program, or any program under `dfsched
//! run`).
//!
//! ```text
//! dfsched[4242] INFO dfsched::runtime: dfsched runtime started policy=co-thread cpus=0-1
//! ```
//!
//! A small subscriber of our own rather than `tracing-subscriber`: this
//! library is preloaded into every process of a program, and formatting
//! fields onto a line is all it needs. Only events whose target is in
//! dfsched are written (a Rust host's own events stay its own), spans are
//! not tracked, and each line goes out in one `write` so lines of
//! different threads do not interleave.
//!
//! It is installed once per process, when a runtime starts with
//! [`crate::RuntimeConfig::log`] set, as the process's global default
//! subscriber: if the program already installed one, that one keeps
//! dfsched's events and a line on stderr says so.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::Once;
use tracing::field::{Field, Visit};
use tracing::span;
use tracing::{Event, Level, Metadata, Subscriber};

/// Writes dfsched's events at `max` and more severe to stderr.
struct StderrLog {
    max: Level,
}

/// Appends `name=value` pairs to a line; the `message` field bare.
struct Line<'a>(&'a mut String);

impl Visit for Line<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value}");
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

impl Subscriber for StderrLog {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        // Level order: ERROR < WARN < INFO < DEBUG < TRACE.
        *m.level() <= self.max && m.target().starts_with("dfsched")
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::from_level(self.max))
    }

    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }

    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

    fn event(&self, event: &Event<'_>) {
        let m = event.metadata();
        let mut line = format!(
            "dfsched[{}] {} {}:",
            std::process::id(),
            m.level(),
            m.target()
        );
        event.record(&mut Line(&mut line));
        line.push('\n');
        // One write per line; a failed write to stderr is nobody's to hear.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn enter(&self, _: &span::Id) {}

    fn exit(&self, _: &span::Id) {}
}

/// Parses a `DFSCHED_LOG` value: `None` for `off`.
pub(crate) fn parse_level(value: &str) -> Result<Option<Level>, String> {
    Ok(Some(match value.trim().to_ascii_lowercase().as_str() {
        "off" | "" => return Ok(None),
        "error" => Level::ERROR,
        "warn" => Level::WARN,
        "info" => Level::INFO,
        "debug" => Level::DEBUG,
        "trace" => Level::TRACE,
        _ => return Err("use off, error, warn, info, debug or trace".into()),
    }))
}

/// Installs the stderr log at `max`, once per process (a second call, or a
/// second runtime, changes nothing).
pub(crate) fn install(max: Level) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if tracing::subscriber::set_global_default(StderrLog { max }).is_err() {
            let _ = writeln!(
                std::io::stderr(),
                "dfsched[{}]: DFSCHED_LOG: the program has a tracing subscriber of its own; dfsched's events go there",
                std::process::id()
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_and_a_bad_one_says_what_is_accepted() {
        assert_eq!(parse_level("info"), Ok(Some(Level::INFO)));
        assert_eq!(parse_level("DEBUG"), Ok(Some(Level::DEBUG)));
        assert_eq!(parse_level("off"), Ok(None));
        assert!(parse_level("loud").unwrap_err().contains("debug"));
    }

    #[test]
    fn only_dfscheds_events_at_or_above_the_level_are_enabled() {
        let log = StderrLog { max: Level::INFO };
        let meta = |level, target| {
            tracing::Metadata::new(
                "e",
                target,
                level,
                None,
                None,
                None,
                tracing::field::FieldSet::new(&[], tracing_core_callsite()),
                tracing::metadata::Kind::EVENT,
            )
        };
        assert!(log.enabled(&meta(Level::WARN, "dfsched::runtime")));
        assert!(log.enabled(&meta(Level::INFO, "dfsched::agent::link")));
        assert!(!log.enabled(&meta(Level::DEBUG, "dfsched::runtime")));
        assert!(!log.enabled(&meta(Level::ERROR, "my_program")));
    }

    /// A callsite identifier for hand-made metadata.
    fn tracing_core_callsite() -> tracing::callsite::Identifier {
        struct Cs;
        impl tracing::callsite::Callsite for Cs {
            fn set_interest(&self, _: tracing::subscriber::Interest) {}
            fn metadata(&self) -> &tracing::Metadata<'_> {
                unreachable!()
            }
        }
        static CS: Cs = Cs;
        tracing::callsite::Identifier(&CS)
    }
}
