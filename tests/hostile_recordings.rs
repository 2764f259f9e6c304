//! Mutated recordings: every number of real reports (attention, serving, sink) replaced by
//! values that break careless indexing. Reading must refuse them with `file:line`, or the
//! screens must draw them (in every pane, at two sizes) without a panic.

mod common;

use common::fixture;
use inferlab::ui::app::{Action, App};
use inferlab::ui::draw;
use inferlab::ui::theme::{ColorMode, Theme};
use inferlab::worker::recording::{self, Recorder};
use inferlab::worker::Event;
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use serde_json::Value;

const INTERESTING: [u64; 8] = [
    0,
    1,
    2,
    7,
    255,
    65_536,
    4_294_967_295,
    1_000_000_000_000_000,
];
const FLOATS: [f64; 5] = [0.0, -1.0, 1e30, 4_294_967_295.0, 0.5];

/// The header line a recorder writes (made once at `file`, which later cases replace).
fn recording_header(file: &std::path::Path) -> String {
    drop(Recorder::create(file, "m", Default::default()).unwrap());
    std::fs::read_to_string(file).unwrap()
}

/// A recording: `header`, then one report per line.
fn recording_text(header: &str, reports: &[Value]) -> String {
    let mut text = header.to_string();
    for v in reports {
        text.push_str(&serde_json::to_string(v).unwrap());
        text.push('\n');
    }
    text
}

/// Pointers to every number in a JSON value.
fn numbers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Number(_) => out.push(at),
        Value::Array(a) => {
            // Long float arrays: a few positions are enough.
            for (i, x) in a.iter().enumerate().take(4) {
                numbers(x, format!("{at}/{i}"), out);
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                numbers(x, format!("{at}/{k}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn mutated_recordings_are_refused_or_drawn_without_panic() {
    let mut reports = fixture::serving_reports(inferlab::serve::CacheKind::Paged, 3);
    reports[2].sink = Some(fixture::sink_view());
    // A contiguous run too: its reservations and gaps are counts the pictures trust.
    reports.extend(fixture::serving_reports(
        inferlab::serve::CacheKind::Contiguous,
        2,
    ));
    let base: Vec<Value> = reports
        .iter()
        .map(|r| serde_json::to_value(r).unwrap())
        .collect();
    let mut paths = Vec::new();
    for (i, b) in base.iter().enumerate() {
        let mut here = Vec::new();
        numbers(b, String::new(), &mut here);
        paths.extend(here.into_iter().map(|p| (i, p)));
    }
    assert!(paths.len() > 300, "{} numbers", paths.len());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.jsonl");
    let header = recording_header(&file);
    let (mut drawn, mut refused) = (0, 0);
    for (case, (which, p)) in paths.iter().enumerate() {
        let mut vals = base.clone();
        let slot = vals[*which].pointer_mut(p).unwrap();
        // Integers stay integers (else serde refuses them before anything draws).
        let x = if slot.is_u64() {
            serde_json::json!(INTERESTING[case % INTERESTING.len()])
        } else {
            serde_json::json!(FLOATS[case % FLOATS.len()])
        };
        *slot = x.clone();
        std::fs::write(&file, recording_text(&header, &vals)).unwrap();
        let rec = match recording::read(&file) {
            Ok(r) => r,
            Err(e) => {
                assert!(e.to_string().contains("m.jsonl"), "{e}");
                refused += 1;
                continue;
            }
        };
        if std::env::var_os("TRACE_MUTATIONS").is_some() {
            eprintln!("report {which}: {p} = {x}");
        }
        let r = std::panic::catch_unwind(|| draw_everything(rec.reports));
        assert!(r.is_ok(), "setting {p} of report {which} to {x} panicked");
        let biggest = r.unwrap();
        // What the pictures would rasterize stays in proportion: every count they draw
        // from is bounded at read time.
        assert!(
            biggest < 16 << 20,
            "setting {p} of report {which} to {x} made a {biggest}-byte picture"
        );
        drawn += 1;
    }
    eprintln!(
        "{} mutations: {drawn} drawn, {refused} refused",
        paths.len()
    );
    assert!(drawn > 0);
}

/// Replays the reports into an app and draws every pane, with the look-at view and the
/// side-by-side serving view on, at a normal and a small size, and renders every pane's
/// picture; returns the largest picture's size in bytes of SVG.
fn draw_everything(reports: Vec<inferlab::report::StepReport>) -> usize {
    let theme = Theme {
        mode: ColorMode::None,
    };
    let mut app = App::new(reports[0].settings.run);
    app.worker.replaying = true;
    app.on_event(Event::Ready { model: "m".into() });
    for r in reports {
        app.on_event(Event::Report(Box::new(r)));
    }
    for a in [
        Action::ToggleLooksAt,
        Action::LayerDown,
        Action::HeadRight,
        Action::ScrollBack,
    ] {
        app.update(a);
        for (w, h) in [(160, 48), (80, 24)] {
            let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
            term.draw(|f| draw::draw(&app, &theme, f.area(), f.buffer_mut()))
                .unwrap();
        }
    }
    use clap::ValueEnum;
    use inferlab::export::{render_svg, ExportPane};
    ExportPane::value_variants()
        .iter()
        .filter_map(|&pane| render_svg(&app.scene(), pane).ok())
        .map(|svg| svg.len())
        .max()
        .unwrap_or(0)
}

/// The counts the pictures and the replay trust, each set far beyond what a session
/// produces: refused at read time with `file:line`, before anything allocates for them.
#[test]
fn counts_beyond_what_a_session_produces_are_refused_by_line() {
    let mut reports = fixture::serving_reports(inferlab::serve::CacheKind::Contiguous, 2);
    reports[1].sink = Some(fixture::sink_view());
    let base: Vec<Value> = reports
        .iter()
        .map(|r| serde_json::to_value(r).unwrap())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.jsonl");
    let header = recording_header(&file);
    let huge = serde_json::json!(1u64 << 40);
    let cases: [(&str, Value); 7] = [
        ("/serve/step/memory/capacity_tokens", huge.clone()),
        ("/serve/requests", huge.clone()),
        ("/serve/page_size", serde_json::json!(0)),
        ("/sink/text_tokens", huge.clone()),
        ("/sink/page_size", serde_json::json!(0)),
        ("/serve/step/reservations/0/1", huge.clone()),
        ("/serve/step/gaps", serde_json::json!([[0, 1u64 << 40]])),
    ];
    for (p, x) in cases {
        let mut vals = base.clone();
        *vals[1].pointer_mut(p).unwrap_or_else(|| panic!("{p}")) = x;
        std::fs::write(&file, recording_text(&header, &vals)).unwrap();
        let Err(e) = recording::read(&file) else {
            panic!("{p} was read as a valid recording");
        };
        let e = e.to_string();
        assert!(e.contains("c.jsonl:3:"), "{p}: {e}");
    }
}

/// Exports of mutated recordings (the kv, batch and sink pictures, as PNG) under an
/// address-space limit of 4× the file plus 1 GB: done or refused, never an abort.
#[test]
fn exports_of_mutated_recordings_stay_within_the_memory_bound() {
    use std::os::unix::process::CommandExt;
    let mut reports = fixture::serving_reports(inferlab::serve::CacheKind::Contiguous, 2);
    reports.extend(fixture::serving_reports(
        inferlab::serve::CacheKind::Paged,
        2,
    ));
    reports[3].sink = Some(fixture::sink_view());
    let base: Vec<Value> = reports
        .iter()
        .map(|r| serde_json::to_value(r).unwrap())
        .collect();
    let mut paths = Vec::new();
    for (i, b) in base.iter().enumerate() {
        let mut here = Vec::new();
        numbers(b, String::new(), &mut here);
        paths.extend(here.into_iter().map(|p| (i, p)));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.jsonl");
    let header = recording_header(&file);
    // Every 12th number, set to the largest interesting values.
    for (case, (which, p)) in paths.iter().enumerate().step_by(12) {
        let mut vals = base.clone();
        *vals[*which].pointer_mut(p).unwrap() = serde_json::json!(INTERESTING[5 + case % 3]);
        let text = recording_text(&header, &vals);
        std::fs::write(&file, &text).unwrap();
        let limit = (text.len() as u64) * 4 + (1 << 30);
        for pane in ["kv", "batch", "sink"] {
            let out = dir.path().join(format!("{pane}.png"));
            let mut c = std::process::Command::new(common::bin());
            c.arg("export")
                .arg(&file)
                .args(["--pane", pane, "--force", "--out"])
                .arg(&out);
            // SAFETY: setrlimit is async-signal-safe; nothing else runs before exec.
            unsafe {
                c.pre_exec(move || {
                    let r = libc::rlimit {
                        rlim_cur: limit,
                        rlim_max: limit,
                    };
                    libc::setrlimit(libc::RLIMIT_AS, &r);
                    Ok(())
                });
            }
            let o = c.output().unwrap();
            assert!(
                matches!(o.status.code(), Some(0) | Some(1)),
                "{p} of report {which} = {}: export --pane {pane}: {:?} {}",
                INTERESTING[5 + case % 3],
                o.status,
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

/// A recording larger than this machine could hold while replaying it is refused before
/// a byte of it is read, with the figures (a sparse file stands in for a huge one).
#[test]
fn a_recording_too_large_to_replay_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.jsonl");
    let header = recording_header(&path);
    std::fs::write(&path, header).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(64 << 30).unwrap();
    drop(f);
    let t = std::time::Instant::now();
    let e = recording::read(&path).expect_err("a 64 GiB recording is refused");
    let msg = e.to_string();
    assert!(
        msg.contains("of memory to replay") || msg.contains("more than a recording may hold"),
        "{msg}"
    );
    assert!(
        t.elapsed() < std::time::Duration::from_secs(2),
        "it was read"
    );
}
