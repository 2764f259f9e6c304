//! `inferlab attach`: the metrics text of each engine (fixtures, sources named in each
//! file) mapped onto our figures; hostile servers; and the real llama.cpp server, started
//! through `scripts/llamacpp-server.py`, under our load, its counters checked against what
//! we received.

mod common;

use inferlab::attach::engines::{Gauges, Server};
use inferlab::attach::http::{self, Base, NetError};
use inferlab::attach::poll::{Link, Poller};
use inferlab::attach::prom;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

fn fixture(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/metrics")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn gauges(name: &str) -> Gauges {
    let e = prom::parse(&fixture(name), 100_000);
    assert_eq!(e.skipped_count, 0, "{name}: {:?}", e.skipped);
    Gauges::read(&e)
}

#[test]
fn llama_cpp_metrics_map_onto_running_waiting_and_the_busy_slots() {
    let g = gauges("llamacpp-b11549.txt");
    assert_eq!(g.server, Server::LlamaCpp);
    let r = g.running.unwrap();
    assert_eq!((r.value, r.metric), (4.0, "llamacpp:requests_processing"));
    assert_eq!(g.waiting.unwrap().value, 2.0);
    assert_eq!(g.decode_calls_total.unwrap().value, 46.0);
    assert!((g.busy_per_decode_avg.unwrap().value - 3.76087).abs() < 1e-9);
    // This build exposes no KV use, preemptions or latency histograms: said, not invented.
    assert!(g.kv_used_pct.is_none() && g.preemptions_total.is_none());
    assert!(g.ttft.is_none() && g.itl.is_none());
    assert!(g
        .unmapped
        .contains(&"llamacpp:prompt_tokens_cached_total".to_string()));
}

#[test]
fn vllm_v1_metrics_give_kv_use_preemptions_step_tokens_and_latency() {
    let g = gauges("vllm-v1.txt");
    assert_eq!(g.server, Server::Vllm);
    assert_eq!(g.running.unwrap().value, 12.0);
    assert_eq!(g.waiting.unwrap().value, 3.0);
    let kv = g.kv_used_pct.unwrap();
    assert_eq!((kv.value, kv.metric), (43.75, "vllm:kv_cache_usage_perc"));
    assert_eq!(g.preemptions_total.unwrap().value, 2.0);
    let steps = g.step_tokens.unwrap();
    assert!((steps.hist.mean().unwrap() - 29.696).abs() < 1e-9);
    let ttft = g.ttft.unwrap();
    // 60 of 100 by 0.1 s: the median lies in (0.04, 0.1], 30/40 of the way.
    assert!((ttft.hist.quantile(0.5).unwrap() - 0.085).abs() < 1e-9);
    assert_eq!(g.itl.unwrap().metric, "vllm:inter_token_latency_seconds");
    // Not vLLM's: the process metrics are not listed as unmapped vLLM figures.
    assert!(
        g.unmapped.iter().all(|m| m.starts_with("vllm:")),
        "{:?}",
        g.unmapped
    );
    assert!(g.unmapped.contains(&"vllm:cache_config_info".to_string()));
}

#[test]
fn older_vllm_names_are_read_where_the_new_ones_are_missing() {
    let g = gauges("vllm-v0.txt");
    assert_eq!(g.kv_used_pct.unwrap().metric, "vllm:gpu_cache_usage_perc");
    assert!((g.kv_used_pct.unwrap().value - 5.0).abs() < 1e-9);
    let itl = g.itl.unwrap();
    assert_eq!(itl.metric, "vllm:time_per_output_token_seconds");
    assert_eq!(itl.hist.count, 895.0);
}

#[test]
fn sglang_metrics_map_and_an_unknown_server_lists_what_it_found() {
    let g = gauges("sglang.txt");
    assert_eq!(g.server, Server::Sglang);
    assert_eq!(g.running.unwrap().value, 28.0);
    assert_eq!(g.waiting.unwrap().value, 7.0);
    assert!((g.kv_used_pct.unwrap().value - 28.0).abs() < 1e-9);
    assert_eq!(g.generated_total.unwrap().value, 7.557572e6);
    assert!(g.ttft.is_some());
    assert_eq!(g.unmapped, vec!["sglang:gen_throughput".to_string()]);
    let u = gauges("unknown-tgi.txt");
    assert_eq!(u.server, Server::Unknown);
    assert!(u.running.is_none());
    assert_eq!(
        u.unmapped,
        [
            "tgi_batch_current_size",
            "tgi_queue_size",
            "tgi_request_count"
        ]
    );
}

#[test]
fn a_histogram_that_does_not_add_up_is_named_not_used() {
    let text = fixture("vllm-v1.txt").replace(
        "le=\"8.0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 400.0",
        "le=\"8.0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 4000.0",
    );
    let g = Gauges::read(&prom::parse(&text, 100_000));
    assert!(g.step_tokens.is_none());
    assert!(g.broken[0].contains("fall"), "{:?}", g.broken);
    assert!(g.running.is_some(), "the rest is still read");
}

#[test]
fn the_poller_turns_counters_into_a_batch_per_decode_and_survives_failures() {
    let mut p = Poller::new("http://x");
    let text = |busy: f64, calls: f64, generated: f64| {
        format!(
            "llamacpp:requests_processing 3\nllamacpp:requests_deferred 1\n\
             llamacpp:n_busy_slots_per_decode {busy}\nllamacpp:n_decode_total {calls}\n\
             llamacpp:tokens_predicted_total {generated}\n"
        )
    };
    p.read(0.0, &text(1.0, 10.0, 10.0));
    // 10 calls at 1 slot, then 10 more at 3: the average is 2 over 20 calls.
    p.read(1.0, &text(2.0, 20.0, 40.0));
    let last = *p.snap.history.last().unwrap();
    assert!((last.batch.unwrap() - 3.0).abs() < 1e-9, "{last:?}");
    assert!((last.tok_per_s.unwrap() - 30.0).abs() < 1e-9, "{last:?}");
    assert_eq!(p.snap.since.generated.unwrap().value, 30.0);
    p.failed(&NetError::Unreachable("http://x/metrics".into()));
    p.failed(&NetError::Unreachable("http://x/metrics".into()));
    assert!(matches!(p.snap.link, Link::Down { tries: 2, .. }));
    // A server that restarted: counters fall, nothing goes negative.
    p.read(2.0, &text(1.0, 2.0, 5.0));
    assert_eq!(p.snap.link, Link::Up);
    assert!(p.snap.since.generated.unwrap().value >= 0.0);
}

/// A one-connection-at-a-time HTTP server answering every request with `answer`.
fn serve(answer: impl Fn(&mut std::net::TcpStream) + Send + 'static) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut req = [0u8; 4096];
            let _ = s.read(&mut req);
            answer(&mut s);
        }
    });
    url
}

#[test]
fn hostile_servers_get_a_clear_error_and_nothing_hangs() {
    let agent = http::agent(Duration::from_secs(3));
    let html = serve(|s| {
        let body = "<html><body>login</body></html>";
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
    });
    let e = http::get_text(&agent, &format!("{html}/metrics"), 1 << 20).unwrap_err();
    assert!(matches!(e, NetError::Html(_)), "{e}");
    // An endless body: read up to the cap, then refused.
    let endless = serve(|s| {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n");
        let line = b"x 1\n".repeat(1024);
        while s.write_all(&line).is_ok() {}
    });
    let t = Instant::now();
    let e = http::get_text(&agent, &format!("{endless}/metrics"), 1 << 20).unwrap_err();
    assert!(matches!(e, NetError::TooLarge(..)), "{e}");
    assert!(t.elapsed() < Duration::from_secs(3));
    // A server that accepts and never answers: the deadline ends the wait.
    let silent = serve(|_| std::thread::sleep(Duration::from_secs(30)));
    let t = Instant::now();
    assert!(http::get_text(&agent, &format!("{silent}/metrics"), 1 << 20).is_err());
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // A redirect is not followed: requests go only where the user said.
    let redirect = serve(|s| {
        let _ = s.write_all(
            b"HTTP/1.1 302 Found\r\nLocation: http://example.org/\r\nContent-Length: 0\r\n\r\n",
        );
    });
    let e = http::get_text(&agent, &format!("{redirect}/metrics"), 1 << 20).unwrap_err();
    assert!(matches!(e, NetError::Status { code: 302, .. }), "{e}");
}

#[test]
fn the_command_refuses_bad_urls_and_says_when_a_host_never_answers() {
    // A time no `Duration` can hold is refused by the parser, not a panic.
    for bad in ["1e300", "NaN", "0", "inf"] {
        let o = Command::new(common::bin())
            .args([
                "attach",
                "http://127.0.0.1:9",
                "--headless",
                &format!("--seconds={bad}"),
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.code() == Some(2) && !err.contains("panicked"),
            "{bad}: {err}"
        );
    }
    let bin = common::bin();
    let o = Command::new(&bin)
        .args(["attach", "file:///etc/passwd", "--headless"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not an http:// or https:// URL"));
    // A port nobody listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let o = Command::new(&bin)
        .args([
            "attach",
            &format!("http://127.0.0.1:{port}"),
            "--headless",
            "--seconds",
            "1",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("never answered /metrics"),
        "{err}"
    );
    // A billion-sample answer is cut at the sample limit, not held whole.
    let big = serve(|s| {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n");
        let mut w = std::io::BufWriter::new(s);
        for i in 0..300_000 {
            if writeln!(w, "m{{i=\"{i}\"}} 1").is_err() {
                return;
            }
        }
    });
    let o = Command::new(&bin)
        .args(["attach", &big, "--headless", "--seconds", "1", "--json"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("\"server\":\"unknown server\""),
        "{out} {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn attached_to_the_real_llama_cpp_server_our_load_batches_and_its_counters_agree() {
    let server = common::llama_server::LlamaServer::start(4);
    assert!(Base::parse(&server.url).is_ok());
    let o = Command::new(common::bin())
        .args([
            "attach",
            &server.url,
            "--headless",
            "--json",
            "--rate",
            "6",
            "--requests",
            "12",
        ])
        .args(["--model", &common::real_model().display().to_string()])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["server"], "llama.cpp server");
    let load = &v["load"];
    assert_eq!(
        (load["done"].as_u64(), load["failed"].as_u64()),
        (Some(12), Some(0)),
        "{v}"
    );
    // The tokens we received are the tokens the server counted.
    assert_eq!(
        v["generated_tokens"].as_f64(),
        load["generated_tokens"].as_f64(),
        "{v}"
    );
    assert_eq!(
        v["generated_tokens_metric"],
        "llamacpp:tokens_predicted_total"
    );
    // Requests overlapped: the server decoded several in one call.
    assert!(v["peak_batch"].as_f64().unwrap() > 1.5, "{v}");
    assert!(v["peak_running"].as_f64().unwrap() >= 2.0, "{v}");
    assert!(v["decode_calls"].as_f64().unwrap() > 0.0);
    assert!(load["ttft_ms_p99"].as_f64().unwrap() >= load["ttft_ms_p50"].as_f64().unwrap());
    assert!(load["itl_ms_p50"].as_f64().unwrap() > 0.0);
}

/// The app attached, its server pane focused and zoomed, drawn from five polls of the
/// llama.cpp fixture, three slots busy, and a load in progress.
fn attach_screen(w: u16, h: u16) -> ratatui::backend::TestBackend {
    use inferlab::attach::slots::Slot;
    use inferlab::ui::attach::AttachView;
    let text = fixture("llamacpp-b11549.txt");
    let mut p = Poller::new("http://127.0.0.1:8080");
    for (k, t) in [0.0, 0.25, 0.5, 0.75, 1.0].into_iter().enumerate() {
        // The counters move between polls: 10 more decode calls at 4 busy slots each.
        let calls = 46.0 + 10.0 * k as f64;
        let busy = (3.76087 * 46.0 + 40.0 * k as f64) / calls;
        let moved = text
            .replace(
                "llamacpp:n_decode_total 46",
                &format!("llamacpp:n_decode_total {calls}"),
            )
            .replace(
                "llamacpp:n_busy_slots_per_decode 3.76087",
                &format!("llamacpp:n_busy_slots_per_decode {busy}"),
            )
            .replace(
                "llamacpp:tokens_predicted_total 56",
                &format!("llamacpp:tokens_predicted_total {}", 56 + 40 * k),
            );
        p.read(t, &moved);
        // Tasks 40 and 41 decode throughout; 42 reads its prompt, then decodes; 39
        // finishes after the first poll.
        let slot = |task, decoded| Slot {
            busy: true,
            task: Some(task),
            decoded,
        };
        let mut slots = vec![slot(40, 5 + k as u64), slot(41, 9), slot(42, k as u64 / 2)];
        if k == 0 {
            slots.push(slot(39, 30));
        }
        slots.resize(4, Slot::default());
        p.read_slots(slots);
    }
    p.snap.version = Some("build b0-unknown".into());
    let mut done = inferlab::serve::Request::new(0, vec![1; 20], 3, 0);
    (done.arrival_s, done.token_s, done.generated) = (0.0, vec![0.05, 0.07, 0.09], vec![0; 3]);
    let view = AttachView {
        snap: p.snap,
        load: Some((
            12,
            3.0,
            vec![inferlab::attach::load::Outcome {
                request: done,
                error: None,
            }],
        )),
    };
    let theme = inferlab::ui::theme::Theme {
        mode: inferlab::ui::theme::ColorMode::None,
    };
    let mut app = inferlab::ui::app::App::new(Default::default());
    app.attach(view);
    // The model loaded and nothing stepped yet: the server pane draws without a report.
    app.worker.ready = true;
    app.screen.zoomed = true;
    let mut term = ratatui::Terminal::new(ratatui::backend::TestBackend::new(w, h)).unwrap();
    term.draw(|f| inferlab::ui::draw::draw(&app, &theme, f.area(), f.buffer_mut()))
        .unwrap();
    term.backend().clone()
}

#[test]
fn the_attach_screen_at_80x24_and_200x60() {
    let small = attach_screen(80, 24);
    let text = format!("{}", small);
    for want in [
        "running requests      4",
        "waiting (queue)       2",
        "batch per decode step 4.0",
        "llamacpp:requests_processing",
        "running 4 of 4 slots · waiting 2",
        "r2  P  P  ███",
        "r3  ███✓",
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
    insta::assert_snapshot!("attach_80x24", small);
    let large = attach_screen(200, 60);
    let text = format!("{}", large);
    for want in ["3 of 4", "▣▣▣□", "1/12 done", "max 6", "not mapped"] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
    insta::assert_snapshot!("attach_200x60", large);
}

#[test]
fn q_quits_the_attach_screen_at_once_while_the_host_never_answers() {
    // A server that accepts and never answers: every poll waits out its deadline.
    let silent = serve(|_| std::thread::sleep(Duration::from_secs(60)));
    let name = format!("inferlab-attach-{}", std::process::id());
    let cmd = format!(
        "{} attach {silent} --model {}",
        common::bin().display(),
        common::real_model().display()
    );
    start_80x24(&name, &cmd);
    // The app loads the model, then shows the server's pane (still connecting).
    let screen = screen_with(&name, &["attached:"]);
    assert!(
        screen.contains("attached:") && screen.contains("connecting") && screen.contains("q quit"),
        "{screen}"
    );
    let t = Instant::now();
    tmux(&["send-keys", "-t", &name, "q"]);
    while tmux(&["has-session", "-t", &name]).status.success() {
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "still running 2 s after q"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_server_that_dies_mid_run_is_said_and_polled_again() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    // Answers three polls with metrics, then closes its socket for good.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten().take(3) {
            let mut req = [0u8; 4096];
            let _ = s.read(&mut req);
            let body = "llamacpp:requests_processing 1\nllamacpp:requests_deferred 0\n";
            let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        }
    });
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let poller = inferlab::attach::poll::spawn(
        Base::parse(&url).unwrap(),
        Duration::from_millis(50),
        stop.clone(),
        tx,
    );
    let t = Instant::now();
    let (mut up, mut down) = (false, 0);
    while t.elapsed() < Duration::from_secs(10) && down < 2 {
        let s = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("a snapshot per poll");
        match s.link {
            Link::Up => up = true,
            Link::Down { tries, .. } if up => down = tries,
            _ => {}
        }
    }
    assert!(up && down >= 2, "up {up}, failed polls after it {down}");
    stop.store(true, Ordering::Relaxed);
    poller.join().unwrap();
}

/// Runs tmux with `args`.
fn tmux(args: &[&str]) -> std::process::Output {
    Command::new("tmux")
        .args(args)
        .output()
        .expect("tmux must be installed (.ci/run installs it)")
}

/// Starts `cmd` in a detached tmux session `name` of 80×24.
fn start_80x24(name: &str, cmd: &str) {
    let args = ["new-session", "-d", "-s", name, "-x", "80", "-y", "24", cmd];
    assert!(tmux(&args).status.success());
}

/// The screen of tmux session `name` once it shows every piece of `want` (or after a
/// minute, to fail with).
fn screen_with(name: &str, want: &[&str]) -> String {
    let t = Instant::now();
    loop {
        let screen =
            String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", name]).stdout).into_owned();
        if want.iter().all(|w| screen.contains(w)) || t.elapsed() > Duration::from_secs(60) {
            return screen;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// As a user runs it: `inferlab attach URL --rate` against the real llama.cpp server opens
/// the app, whose server pane draws the requests our load put in its slots, and q quits.
#[test]
fn the_attached_app_draws_the_real_servers_slots_as_our_timeline() {
    let server = common::llama_server::LlamaServer::start(4);
    let name = format!("inferlab-attached-{}", std::process::id());
    let cmd = format!(
        "{} attach {} --rate 4 --requests 16 --model {}",
        common::bin().display(),
        server.url,
        common::real_model().display()
    );
    start_80x24(&name, &cmd);
    let want = ["attached: llama.cpp server", "of 4 slots", "r0 ", "r3 "];
    let screen = screen_with(&name, &want);
    let shown = want.iter().all(|w| screen.contains(w));
    tmux(&["send-keys", "-t", &name, "q"]);
    let t = Instant::now();
    while tmux(&["has-session", "-t", &name]).status.success() && t.elapsed().as_secs() < 5 {
        std::thread::sleep(Duration::from_millis(50));
    }
    let gone = !tmux(&["has-session", "-t", &name]).status.success();
    if !gone {
        tmux(&["kill-session", "-t", &name]);
    }
    assert!(shown, "{want:?} not all on screen:\n{screen}");
    assert!(gone, "still running 5 s after q");
}
