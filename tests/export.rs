//! Pictures: every pane exports as SVG and PNG from real app state, the pictures hold what
//! the panes show (labels, boundary, legend, colours where the weights are), and bad paths
//! or missing data give clear errors, in the library and through `inferlab export`.

mod common;

use common::fixture::{app, serving_reports};
use inferlab::export::{self, ExportError, ExportPane, ImageFormat};
use inferlab::report::StepReport;
use inferlab::serve::{CacheKind, ReqPhase};
use inferlab::ui::app::{Action, App, Pane};
use inferlab::ui::panes::export_of;
use inferlab::worker::Event;
use resvg::tiny_skia::Pixmap;
use std::process::Command;

fn app_with(reports: &[StepReport]) -> App {
    let mut a = app();
    for r in reports {
        a.on_event(Event::Report(Box::new(r.clone())));
    }
    a
}

fn count(hay: &str, needle: &str) -> usize {
    hay.matches(needle).count()
}

#[test]
fn the_attention_picture_has_the_weights_labels_boundary_and_legend() {
    let a = app();
    let svg = export::render_svg(&a.scene(), ExportPane::Attention).unwrap();
    // Head 0 of the fixture puts its largest weight (0.6) on the diagonal: exactly those
    // ten cells take the top of the ramp (+1 the legend's end); every row but the last has
    // a masked future, drawn as one run (+1 legend swatch).
    assert_eq!(count(&svg, r##"fill="#fde725""##), 11);
    assert_eq!(count(&svg, r##"fill="#e6e6ea""##), 10);
    for label in ["What", "cache", "+ A", "prompt ↑", "generated ↓", "0.600"] {
        assert!(svg.contains(label), "missing {label:?}");
    }
    assert!(svg.contains("query head 0 (reads KV head 0)"));
    assert_eq!(
        count(&svg, "stroke-dasharray"),
        3,
        "two boundary lines and the legend's"
    );
    // Another head gives another picture: head 2's favourite key is two positions back.
    let mut b = app();
    b.update(Action::HeadRight);
    b.update(Action::HeadRight);
    let svg2 = export::render_svg(&b.scene(), ExportPane::Attention).unwrap();
    assert_ne!(svg, svg2);
    assert!(svg2.contains("query head 2"));
}

#[test]
fn the_png_is_the_svg_at_twice_the_size_with_the_same_colours() {
    let a = app();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.png");
    export::write(
        &a.scene(),
        ExportPane::Attention,
        ImageFormat::Png,
        &p,
        Default::default(),
    )
    .unwrap();
    let pix = Pixmap::load_png(&p).unwrap();
    // 10 cells of 22 units with 120 + 140 margins across.
    assert_eq!(pix.width(), 2 * (120 + 220 + 140));
    // The centre of diagonal cell (3, 3) is the top of the viridis ramp (253, 231, 37).
    let (x, y) = (
        (2.0 * (120.0 + 3.5 * 22.0)) as u32,
        (2.0 * (150.0 + 3.5 * 22.0)) as u32,
    );
    let c = pix.pixel(x, y).unwrap();
    assert_eq!((c.red(), c.green(), c.blue()), (253, 231, 37));
    // Cell (3, 7) is in the future: the masked grey.
    let x = (2.0 * (120.0 + 7.5 * 22.0)) as u32;
    let c = pix.pixel(x, y).unwrap();
    assert_eq!((c.red(), c.green(), c.blue()), (230, 230, 234));
    // Text was drawn with the embedded font: the label column is not blank.
    let dark = (0..2 * 120)
        .flat_map(|x| (2 * 150..2 * 370).map(move |y| (x, y)))
        .filter(|&(x, y)| pix.pixel(x, y).unwrap().red() < 100)
        .count();
    assert!(dark > 200, "only {dark} dark pixels in the label column");
}

#[test]
fn heads_kv_and_batch_pictures_come_from_the_live_state() {
    for cache in [CacheKind::Paged, CacheKind::Contiguous] {
        let reports = serving_reports(cache, 6);
        let a = app_with(&reports);
        let heads = export::render_svg(&a.scene(), ExportPane::Heads).unwrap();
        for s in [
            "q0",
            "q1",
            "q2",
            "K/V head 0",
            "3 query heads read 1 KV head(s)",
        ] {
            assert!(heads.contains(s), "heads: missing {s}");
        }
        let sv = reports.last().unwrap().serve.as_ref().unwrap();
        let kv = export::render_svg(&a.scene(), ExportPane::Kv).unwrap();
        let util = format!(
            "({:.1}% utilization)",
            sv.step.memory.utilization_pct().unwrap()
        );
        assert!(kv.contains(&util), "kv: {util} not in picture");
        let kind = format!("{cache:?}").to_lowercase();
        assert!(kv.contains(&format!("KV cache · {kind}")));
        // One owner label per page (paged) or page-sized run of a reservation (contiguous).
        let cells = match cache {
            CacheKind::Paged => sv
                .step
                .pages
                .iter()
                .filter(|p| !p.owners.is_empty())
                .count(),
            CacheKind::Contiguous => sv.step.reservations.iter().map(|r| r.1.div_ceil(4)).sum(),
        };
        assert_eq!(count(&kv, "font-size=\"10.0\""), cells);
        let batch = export::render_svg(&a.scene(), ExportPane::Batch).unwrap();
        let peak = reports
            .iter()
            .map(|r| {
                let s = &r.serve.as_ref().unwrap().step;
                s.active
                    .iter()
                    .filter(|a| matches!(a.phase, ReqPhase::Prefill | ReqPhase::Decode))
                    .count()
            })
            .max()
            .unwrap();
        assert!(
            batch.contains(&format!("6 iterations · peak active set {peak}")),
            "{batch}"
        );
        for p in [ExportPane::Heads, ExportPane::Kv, ExportPane::Batch] {
            let png = export::to_png(&export::render_svg(&a.scene(), p).unwrap(), 1.0).unwrap();
            assert_eq!(&png[1..4], b"PNG");
        }
    }
}

#[test]
fn missing_data_and_unwritable_paths_are_clear_errors() {
    let fresh = App::new(Default::default());
    let e = export::render_svg(&fresh.scene(), ExportPane::Attention).unwrap_err();
    assert!(matches!(e, ExportError::NoData(_)), "{e}");
    // The fixture has no serving workload beside it.
    let e = export::render_svg(&app().scene(), ExportPane::Kv).unwrap_err();
    assert!(e.to_string().contains("serving workload"), "{e}");
    let bad = std::path::Path::new("/nonexistent-dir/x.svg");
    let e = export::write(
        &app().scene(),
        ExportPane::Heads,
        ImageFormat::Svg,
        bad,
        Default::default(),
    )
    .unwrap_err();
    assert!(matches!(e, ExportError::File(_)), "{e}");
    assert!(e.to_string().contains("/nonexistent-dir/x.svg"), "{e}");
}

#[test]
fn the_e_key_writes_the_focused_pane_and_says_where() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("INFERLAB_EXPORT_DIR", dir.path());
    let mut a = app();
    a.update(Action::Export);
    inferlab::ui::perform_writes(&mut a);
    let svg = dir.path().join("inferlab-attention-l0h0-iter3.svg");
    assert!(svg.exists(), "{}", a.status);
    assert!(svg.with_extension("png").exists());
    assert!(a.status.contains("exported attention"), "{}", a.status);
    // Every pane has a picture: the output pane's too.
    while a.screen.focus != Pane::Output {
        a.update(Action::FocusNext);
    }
    a.update(Action::Export);
    inferlab::ui::perform_writes(&mut a);
    assert!(a.status.contains("exported output"), "{}", a.status);
    assert!(dir.path().join("inferlab-output-iter3.png").exists());
    // The traffic pane (t) too; one test, since the export folder is process-wide.
    let mut a = common::fixture::traffic_app();
    a.update(Action::Export);
    inferlab::ui::perform_writes(&mut a);
    assert!(a.status.contains("exported traffic"), "{}", a.status);
    assert!(dir.path().join("inferlab-traffic-iter3.png").exists());
    // Pressed again, `e` replaces nothing: the next free name, and a planted link at the
    // default name is skipped, not written through.
    let users = dir.path().join("users-file");
    std::fs::write(&users, "precious").unwrap();
    std::os::unix::fs::symlink(&users, dir.path().join("inferlab-traffic-iter3-2.svg")).unwrap();
    a.update(Action::Export);
    inferlab::ui::perform_writes(&mut a);
    assert!(a.status.contains("iter3-3.svg"), "{}", a.status);
    assert!(dir.path().join("inferlab-traffic-iter3-3.png").exists());
    assert_eq!(std::fs::read_to_string(&users).unwrap(), "precious");
}

#[test]
fn inferlab_export_draws_any_iteration_of_a_recording() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("s.jsonl");
    let mut w =
        inferlab::worker::recording::Recorder::create(&rec, "fixture.gguf", Default::default())
            .unwrap();
    for r in serving_reports(CacheKind::Paged, 4) {
        w.write(&r).unwrap();
    }
    drop(w);
    let run = |args: &[&str]| {
        Command::new(common::bin())
            .arg("export")
            .arg(&rec)
            .args(args)
            .current_dir(dir.path())
            // Another test in this process sets the export folder; default names land here.
            .env_remove("INFERLAB_EXPORT_DIR")
            .output()
            .unwrap()
    };
    let out = dir.path().join("a.svg");
    let o = run(&[
        "--step",
        "2",
        "--pane",
        "attention",
        "--head",
        "1",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let svg = std::fs::read_to_string(&out).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("query head 1"));
    // Default name and format (PNG) in the current directory.
    let o = run(&["--pane", "batch"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let png = std::fs::read(dir.path().join("inferlab-batch-iter4.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    let o = run(&["--pane", "kv", "--format", "svg", "--step", "3"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(dir.path().join("inferlab-kv-iter3.svg").exists());
    // Bad input: an iteration not recorded, a layer out of range, an unwritable path, a corrupt file.
    let o = run(&["--step", "99"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("iteration 99 is not in the recording"),
        "{e}"
    );
    let o = run(&["--layer", "7"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("layer 7"), "{e}");
    let o = run(&["--out", "/nonexistent-dir/a.png"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("writing /nonexistent-dir/a.png"),
        "{e}"
    );
    // Nothing the user has is lost: not the recording itself, not an existing picture
    // (unless --force), not a file a planted link points to.
    let before = std::fs::read(&rec).unwrap();
    let o = run(&["--out", rec.to_str().unwrap(), "--force"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("own input"), "{e}");
    assert_eq!(std::fs::read(&rec).unwrap(), before);
    let o = run(&["--out", out.to_str().unwrap()]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("--force"), "{e}");
    assert!(std::fs::read_to_string(&out)
        .unwrap()
        .contains("query head 1"));
    let o = run(&["--out", out.to_str().unwrap(), "--force", "--head", "2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read_to_string(&out)
        .unwrap()
        .contains("query head 2"));
    let users = dir.path().join("users-notes.txt");
    std::fs::write(&users, "precious").unwrap();
    std::os::unix::fs::symlink(&users, dir.path().join("inferlab-heads-l0h0-iter4.png")).unwrap();
    let o = run(&["--pane", "heads", "--force"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read_to_string(&users).unwrap(), "precious");
    let bad = dir.path().join("bad.jsonl");
    let text = std::fs::read_to_string(&rec).unwrap();
    std::fs::write(
        &bad,
        format!("{}\n{{\"iteration\": 1\n", text.lines().next().unwrap()),
    )
    .unwrap();
    let o = Command::new(common::bin())
        .arg("export")
        .arg(&bad)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("bad.jsonl:2"), "{e}");
}

#[test]
fn the_sink_picture_and_a_recording_that_holds_the_experiment() {
    let mut r = common::fixture::report();
    let mut v = common::fixture::sink_view();
    // Before the window first fills there is no after-eviction perplexity: JSON has no
    // NaN, and a recording must still read back.
    v.lanes[1].perplexity_after_eviction = None;
    r.sink = Some(v.clone());
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("s.jsonl");
    let mut w =
        inferlab::worker::recording::Recorder::create(&rec, "fixture.gguf", Default::default())
            .unwrap();
    w.write(&r).unwrap();
    drop(w);
    let back = inferlab::worker::recording::read(&rec).unwrap().reports;
    assert_eq!(back[0].sink.as_ref(), Some(&v));
    let a = app_with(&back);
    let svg = export::render_svg(&a.scene(), ExportPane::Sink).unwrap();
    for s in [
        "token 20 of 40",
        "window + first page",
        "perplexity 30.25 · after the first eviction —",
        "perplexity 11.75 · after the first eviction 12.75",
    ] {
        assert!(svg.contains(s), "missing {s:?}");
    }
    // Pages: 5 of 10 read; the full cache holds 5, each window 3 and shows 2 evicted (×).
    assert_eq!(
        count(&svg, r##"stroke="#d62728" stroke-width="0.8""##),
        4 + 1
    );
    // In the app, e on the serving pane exports the experiment while it is shown.
    let mut running = app_with(&back);
    running.settings.sink = true;
    assert_eq!(export_of(&running, Pane::Serving), Some(ExportPane::Sink));
    assert_eq!(export_of(&app(), Pane::Serving), Some(ExportPane::Batch));
    // A session without it says so.
    let e = export::render_svg(&app().scene(), ExportPane::Sink).unwrap_err();
    assert!(e.to_string().contains("x starts it"), "{e}");
}

#[test]
fn the_kv_pane_exports_the_request_it_shows_and_export_paths_behave() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = app_with(&serving_reports(CacheKind::Paged, 2));
    while a.screen.focus != Pane::Kv {
        a.update(Action::FocusNext);
    }
    assert_eq!(export_of(&a, Pane::Kv), Some(ExportPane::Request));
    let svg = export::render_svg(&a.scene(), ExportPane::Request).unwrap();
    let kv = &a.report().unwrap().kv;
    assert!(svg.contains("the live request"), "{svg}");
    assert!(svg.contains(&format!("{} of {} slots hold tokens", kv.used, kv.capacity)));
    assert!(!svg.contains("paged"), "not the serving pool");
    // Through the CLI: INFERLAB_EXPORT_DIR is honoured, and format and name must agree.
    let rec = dir.path().join("s.jsonl");
    let mut w =
        inferlab::worker::recording::Recorder::create(&rec, "fixture.gguf", Default::default())
            .unwrap();
    for r in serving_reports(CacheKind::Paged, 3) {
        w.write(&r).unwrap();
    }
    drop(w);
    let pics = dir.path().join("not/yet/made");
    let o = Command::new(common::bin())
        .args(["export", rec.to_str().unwrap(), "--pane", "heads"])
        .env("INFERLAB_EXPORT_DIR", &pics)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let written = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(written.starts_with(pics.to_str().unwrap()), "{written}");
    assert!(std::path::Path::new(&written).exists());
    let o = Command::new(common::bin())
        .args([
            "export",
            rec.to_str().unwrap(),
            "--pane",
            "heads",
            "--format",
            "png",
        ])
        .arg("--out")
        .arg(dir.path().join("x.svg"))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("--format png") && e.contains(".svg"),
        "{e}"
    );
    assert!(!dir.path().join("x.svg").exists());
}

#[test]
fn the_timeline_picture_holds_one_run_and_its_legend_fits() {
    use inferlab::serve::Policy;
    let mut reports = serving_reports(CacheKind::Paged, 4);
    // The workload restarted under the other policy (as `b` does): a new run from iteration 0.
    reports.extend(common::fixture::serving_reports_with(
        Policy::Static,
        CacheKind::Paged,
        2,
    ));
    let a = app_with(&reports);
    let svg = export::render_svg(&a.scene(), ExportPane::Batch).unwrap();
    assert!(svg.contains("static batching"), "{svg}");
    assert!(
        svg.contains("2 iterations"),
        "only the run after the switch: {svg}"
    );
    // Each request with a token so far ends its row in its time to first token, as the
    // pane does (the fixture's fixed 2 ms per id, plus 1).
    assert!(
        svg.contains(">1 ms<") && svg.contains("time to first token"),
        "{svg}"
    );
    let width: f32 = svg
        .split("width=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap()
        .parse()
        .unwrap();
    // Each legend entry's text starts well inside the picture (6.8 units per character).
    for part in svg.split("<text").skip(1) {
        let x: f32 = part
            .split("x=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap()
            .parse()
            .unwrap();
        let text = part
            .split('>')
            .nth(1)
            .unwrap_or("")
            .split('<')
            .next()
            .unwrap_or("");
        if text == "rejected" || text.starts_with("padding") {
            assert!(
                x + 6.8 * text.chars().count() as f32 <= width,
                "{text} at {x} of {width}"
            );
        }
    }
}

#[test]
fn the_output_and_forward_panes_export_what_they_show() {
    let a = app_with(&serving_reports(CacheKind::Paged, 3));
    let r = a.report().unwrap();
    assert_eq!(export_of(&a, Pane::Output), Some(ExportPane::Output));
    assert_eq!(export_of(&a, Pane::Forward), Some(ExportPane::Forward));
    let out = export::render_svg(&a.scene(), ExportPane::Output).unwrap();
    assert!(!r.info.top_k.is_empty());
    // One bar per candidate, the sampled one in the accent colour.
    assert_eq!(count(&out, "%</text>"), r.info.top_k.len());
    assert_eq!(count(&out, r##"fill="#c77c2a""##), 1, "{out}");
    // Sampled, the picture quotes the sampler's probabilities beside the model's, as the
    // pane does, and its bars are what the step drew with.
    let mut sampled = r.clone();
    sampled.info.sampler.temperature = 0.7;
    for (i, t) in sampled.info.top_k.iter_mut().enumerate() {
        t.drawn = if i == 0 { 0.9 } else { 0.0 };
    }
    let drew = export::render_svg(&app_with(&[sampled]).scene(), ExportPane::Output).unwrap();
    assert!(drew.contains("model % → drawn %"), "{drew}");
    assert!(drew.contains("→ 90.0%"), "{drew}");
    let fwd = export::render_svg(&a.scene(), ExportPane::Forward).unwrap();
    let layers = r.info.timing.layers_ms.len();
    assert!(layers > 0);
    // embed + every layer + LM head + sample, each with its time.
    assert_eq!(count(&fwd, r#"font-size="10.0""#), layers + 3, "{fwd}");
    assert!(fwd.contains(&format!("layer {}", layers - 1)));
    for p in [ExportPane::Output, ExportPane::Forward] {
        let png = export::to_png(&export::render_svg(&a.scene(), p).unwrap(), 1.0).unwrap();
        assert_eq!(&png[1..4], b"PNG");
    }
}

#[test]
fn the_traffic_pane_exports_its_bars_crossover_and_roofline() {
    let mut a = common::fixture::traffic_app();
    assert_eq!(a.screen.focus, Pane::Traffic);
    assert_eq!(export_of(&a, Pane::Traffic), Some(ExportPane::Traffic));
    let svg = export::render_svg(&a.scene(), ExportPane::Traffic).unwrap();
    for s in [
        "Memory traffic",
        "KV &gt; weights past ≈",
        "int8 peak 1600 G op/s",
        "prefill · ",
        "B=1 decode · ",
        "serving batch · ",
    ] {
        assert!(svg.contains(s), "{s} missing");
    }
    // Two bars (live step, serving batch) of up to four kinds each, and the legend's four.
    let weights = count(&svg, r##"fill="#3b6ea5""##);
    assert!((2 + 1..=2 + 1 + 3).contains(&weights), "{weights}");
    let png = export::to_png(&svg, 1.0).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    // Without measured limits the picture says so instead of drawing a roofline.
    a.worker.machine = None;
    let svg = export::render_svg(&a.scene(), ExportPane::Traffic).unwrap();
    assert!(svg.contains("No roofline") && !svg.contains("int8 peak"));
}

/// Messages say what is wrong in the user's terms: a file where the export folder should
/// be, an output named for a format export does not write, a recording too new or saved
/// with a byte-order mark, a recording cut short (warned as replay warns), a size with an
/// exponent, a config.json that is not an object, a lesson check that can never hold and
/// a prompt too long for a lesson, a write target that is a device.
#[test]
fn messages_say_what_is_wrong_in_the_users_terms() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("s.jsonl");
    let mut w =
        inferlab::worker::recording::Recorder::create(&rec, "fixture.gguf", Default::default())
            .unwrap();
    for r in serving_reports(CacheKind::Paged, 3) {
        w.write(&r).unwrap();
    }
    w.finish().unwrap();
    let text = std::fs::read_to_string(&rec).unwrap();
    let run = |args: &[&std::ffi::OsStr], env: &[(&str, &std::path::Path)]| {
        let mut c = Command::new(common::bin());
        c.args(args).current_dir(dir.path());
        for (k, v) in env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    let os = |s: &str| std::ffi::OsString::from(s);
    // INFERLAB_EXPORT_DIR naming a file.
    let file = dir.path().join("not-a-folder");
    std::fs::write(&file, "x").unwrap();
    let (ok, err) = run(
        &[&os("export"), rec.as_os_str()],
        &[("INFERLAB_EXPORT_DIR", &file)],
    );
    assert!(!ok && err.contains("is a file, not a folder"), "{err}");
    // --out x.gif.
    let (ok, err) = run(
        &[&os("export"), rec.as_os_str(), &os("--out"), &os("x.gif")],
        &[],
    );
    assert!(!ok && err.contains("SVG or PNG"), "{err}");
    assert!(!dir.path().join("x.gif").exists());
    // A header version past u32, and a byte-order mark.
    let newer = dir.path().join("newer.jsonl");
    std::fs::write(
        &newer,
        text.replacen("\"version\":2", "\"version\":4294967296", 1),
    )
    .unwrap();
    let (ok, err) = run(&[&os("replay"), newer.as_os_str()], &[]);
    assert!(!ok && err.contains("version 4294967296"), "{err}");
    let bom = dir.path().join("bom.jsonl");
    std::fs::write(&bom, format!("\u{feff}{text}")).unwrap();
    let out = dir.path().join("bom.svg");
    let (ok, err) = run(
        &[
            &os("export"),
            bom.as_os_str(),
            &os("--pane"),
            &os("kv"),
            &os("--out"),
            out.as_os_str(),
        ],
        &[],
    );
    assert!(ok, "{err}");
    // Cut short: export warns as replay does.
    let cut = dir.path().join("cut.jsonl");
    std::fs::write(&cut, &text[..text.len() - 40]).unwrap();
    let out = dir.path().join("cut.svg");
    let (ok, err) = run(
        &[
            &os("export"),
            cut.as_os_str(),
            &os("--pane"),
            &os("kv"),
            &os("--out"),
            out.as_os_str(),
        ],
        &[],
    );
    assert!(ok && err.contains("warning"), "{err}");
    // A size with an exponent is read as one.
    let (ok, err) = run(&[&os("budget"), &os("--memory"), &os("1e30GB")], &[]);
    assert!(!ok && err.contains("more bytes than any device"), "{err}");
    // config.json of [].
    let hf = dir.path().join("hf");
    std::fs::create_dir(&hf).unwrap();
    std::fs::write(hf.join("config.json"), "[]").unwrap();
    let (ok, err) = run(
        &[&os("model"), &os("info"), &os("--model"), hf.as_os_str()],
        &[],
    );
    assert!(
        !ok && err.contains("not a JSON object") && !err.contains("struct Hf"),
        "{err}"
    );
    // Lessons: a check past any count, and a prompt longer than a lesson sends.
    let lessons = dir.path().join("lessons");
    std::fs::create_dir(&lessons).unwrap();
    let long = "word ".repeat(400);
    std::fs::write(
        lessons.join("01-x.md"),
        format!("# T\n\n## S\nshows: x\nprompt: {long}\ntask: t\ncheck: steps >= 1e30\n"),
    )
    .unwrap();
    let (ok, err) = run(
        &[
            &os("lessons"),
            &os("--check"),
            &os("--dir"),
            lessons.as_os_str(),
        ],
        &[],
    );
    assert!(
        !ok && err.contains("out of reach") && err.contains("over 1000 characters"),
        "{err}"
    );
    // A write target that is a device.
    let (ok, err) = run(
        &[
            &os("export"),
            rec.as_os_str(),
            &os("--out"),
            &os("/dev/null"),
            &os("--format"),
            &os("svg"),
            &os("--force"),
        ],
        &[],
    );
    assert!(
        !ok && err.contains("must be a regular file") && !err.contains("reads a"),
        "{err}"
    );
}

/// The most memory (bytes) child `c` held at once, waited for with its resource usage.
fn max_rss_of(c: std::process::Child) -> (i32, u64) {
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pid is our own unwaited child; the pointers are to live locals.
    let pid = unsafe { libc::wait4(c.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, c.id() as i32, "wait4");
    // ru_maxrss is in KiB on Linux.
    (status, usage.ru_maxrss as u64 * 1024)
}

/// Export reads a recording as a stream and the app keeps a bounded history, so a long
/// session exports in far less memory than its file takes (it used to read the whole
/// file and every report into memory, about five times the file).
#[cfg(target_os = "linux")]
#[test]
fn export_of_a_long_recording_takes_less_memory_than_the_file() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("long.jsonl");
    let reports = serving_reports(CacheKind::Paged, 4);
    let mut w =
        inferlab::worker::recording::Recorder::create(&rec, "fixture.gguf", Default::default())
            .unwrap();
    w.write(&reports[0]).unwrap();
    w.finish().unwrap();
    let mut f =
        std::io::BufWriter::new(std::fs::OpenOptions::new().append(true).open(&rec).unwrap());
    let mut r = reports.last().unwrap().clone();
    let mut size = std::fs::metadata(&rec).unwrap().len();
    const FILE: u64 = 400 << 20;
    while size < FILE {
        r.iteration += 1;
        let line = serde_json::to_string(&r).unwrap();
        writeln!(f, "{line}").unwrap();
        size += line.len() as u64 + 1;
    }
    drop(f);
    let out = dir.path().join("t.svg");
    let child = Command::new(common::bin())
        .args(["export", "--pane", "batch", "--out"])
        .arg(&out)
        .arg(&rec)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (status, rss) = max_rss_of(child);
    assert_eq!(status, 0, "export failed");
    assert!(out.exists());
    assert!(
        rss < size / 2,
        "export of a {size}-byte recording held {rss} bytes at its peak"
    );
}
