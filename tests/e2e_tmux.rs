//! Drives the real release binary with the real model inside tmux: keys in, screen out.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

struct Tmux {
    name: String,
}

impl Tmux {
    fn start(w: u16, h: u16) -> Self {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let k = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = format!("inferlab-e2e-{}-{k}", std::process::id());
        // Tests start sessions in parallel; when no tmux server runs yet, each client starts
        // one and a client can lose that race ("server exited unexpectedly", seen once in
        // CI), so a failed start is tried again.
        let mut why = String::new();
        for _ in 0..5 {
            let o = Command::new("tmux")
                .args([
                    "new-session",
                    "-d",
                    "-s",
                    &name,
                    "-x",
                    &w.to_string(),
                    "-y",
                    &h.to_string(),
                    "bash --norc --noprofile",
                ])
                .env("PS1", "$ ")
                .output()
                .expect("tmux must be installed (.ci/run installs it)");
            if o.status.success() {
                return Self { name };
            }
            why = String::from_utf8_lossy(&o.stderr).into_owned();
            std::thread::sleep(Duration::from_millis(300));
        }
        panic!("tmux new-session failed five times: {why}");
    }

    /// Starts the app on the real model in a `w × h` terminal, `env` set before the
    /// command and `args` after `--model`, and waits until it is ready.
    fn start_app(w: u16, h: u16, env: &str, args: &str) -> Self {
        let t = Self::start(w, h);
        // The app measures this machine once and caches it in its data folder; measured
        // beside the other tests it would come out low, so that folder is the tests' own
        // (an `env` naming another one comes later and wins).
        let data = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-data");
        let cmd = format!(
            "INFERLAB_DATA_DIR={} {env} {} --model {} {args}",
            data.display(),
            common::bin().display(),
            common::real_model().display()
        );
        t.keys(&[&cmd, "Enter"]);
        t.wait_for("ready: press space", 60);
        t
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", &self.name];
        args.extend_from_slice(keys);
        assert!(Command::new("tmux").args(&args).status().unwrap().success());
    }

    fn screen(&self) -> String {
        let o = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).to_string()
    }

    fn wait_for(&self, needle: &str, secs: u64) -> String {
        self.wait_for_all(&[needle], secs)
    }

    /// Waits for one capture holding every needle: a capture can catch a frame half
    /// drawn, so a single needle does not prove the rest of the frame is there yet.
    fn wait_for_all(&self, needles: &[&str], secs: u64) -> String {
        let t = Instant::now();
        loop {
            let s = self.screen();
            if needles.iter().all(|n| s.contains(n)) {
                return s;
            }
            if t.elapsed() > Duration::from_secs(secs) {
                panic!("timed out waiting for {needles:?}; screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until no capture holds `needle`. Keys sent right after Esc must wait for
    /// this: an Esc and the next key read together arrive as one Alt-chord.
    fn wait_gone(&self, needle: &str, secs: u64) {
        let t = Instant::now();
        while self.screen().contains(needle) {
            if t.elapsed() > Duration::from_secs(secs) {
                panic!("{needle:?} is still on screen:\n{}", self.screen());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Quits the app and waits until its screen is gone, so keys typed next reach the
    /// shell rather than an app still shutting down.
    fn quit(&self) {
        self.keys(&["q"]);
        // Every header but the narrowest fallback says the iteration (the app's name is
        // dropped first at 80 columns).
        self.wait_gone(" · iteration ", 20);
    }

    fn resize(&self, w: u16, h: u16) {
        Command::new("tmux")
            .args([
                "resize-window",
                "-t",
                &self.name,
                "-x",
                &w.to_string(),
                "-y",
                &h.to_string(),
            ])
            .status()
            .unwrap();
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.name])
            .status();
    }
}

/// The layer and head the attention pane's title shows.
fn layer_head(screen: &str) -> (usize, usize) {
    let num = |after: &str| -> usize {
        let at = screen.find(after).expect(after) + after.len();
        screen[at..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect::<String>()
            .parse()
            .unwrap()
    };
    (num("attention · layer "), num("/29 · head "))
}

/// The KV pane's first line: "utilization 17.7%: 42 of 237 slots hold tokens".
fn kv_line(screen: &str) -> String {
    let line = screen
        .lines()
        .find(|l| l.contains("│utilization ") && l.contains("%: "))
        .unwrap_or_default();
    assert!(!line.is_empty(), "no KV line on screen:\n{screen}");
    line.to_string()
}

#[test]
fn app_steps_toggles_resizes_and_quits_cleanly() {
    let t = Tmux::start_app(160, 48, "", "");
    t.keys(&["Space"]);
    let s1 = t.wait_for("iteration 1 ·", 30);
    let kv1 = kv_line(&s1);
    t.keys(&["Space"]);
    t.wait_for("iteration 2 ·", 30);
    t.keys(&["Space"]);
    let s3 = t.wait_for("iteration 3 ·", 30);
    assert_ne!(
        kv1,
        kv_line(&s3),
        "the KV grid grows as tokens are appended"
    );
    assert!(s3.contains("GQA") && s3.contains("9 query heads read 3 KV head(s)"));
    // m cycles MHA → GQA → MQA: from GQA, MQA stores one KV head, then MHA nine.
    t.keys(&["m"]);
    t.wait_for("9 query heads read 1 KV head(s)", 30);
    t.keys(&["m"]);
    let s = t.wait_for_all(&["9 query heads read 9 KV head(s)", "· MHA ·"], 30);
    assert_ne!(
        kv_line(&s),
        kv_line(&s3),
        "MHA reserves three times the bytes"
    );
    // The serving workload: c switches its cache to contiguous, b its policy to static.
    t.keys(&["c"]);
    t.wait_for("continuous batching · contiguous kv", 10);
    t.keys(&["Space"]);
    t.wait_for("one cell per 16 slots, in address order", 30);
    t.keys(&["b"]);
    t.wait_for("static batching · contiguous kv", 10);
    t.keys(&["c"]);
    t.keys(&["Space"]);
    t.wait_for("▄9 nine slots hold tokens", 30);
    // Side by side: the same workload on the paged and the contiguous cache, stepped together.
    t.keys(&["s"]);
    t.keys(&["Space"]);
    // Both runs are on screen.
    t.wait_for_all(&["batching · contiguous kv", "batching · paged kv"], 30);
    t.keys(&["s", "s"]);
    // W loads the 4-bit weights and recomputes the request: the header names them.
    t.keys(&["W"]);
    t.wait_for("Q4 weights in", 30);
    t.keys(&["W", "W"]);
    t.wait_for("Q8_0 weights in", 60);
    // Help lists the keys.
    t.keys(&["?"]);
    t.wait_for_all(&["help · keys", "head layout", "quit", "kernel naive"], 10);
    t.keys(&["Escape"]);
    t.wait_gone("help · keys", 10);
    // Resize small, then back.
    t.resize(60, 20);
    t.wait_for("needs a terminal of at least 80×24", 10);
    t.resize(120, 40);
    t.wait_for("attention · layer", 10);
    // The app opened on the head its first prefill showed sharpest; j and l move on.
    let (layer, head) = layer_head(&t.screen());
    t.keys(&["j", "l"]);
    t.wait_for(
        &format!("layer {}/29 · head {}/8", (layer + 1) % 30, (head + 1) % 9),
        10,
    );
    t.quit();
    // The shell is back, echoing and in cooked mode.
    t.keys(&["echo SANE-$((40+2))", "Enter"]);
    let s = t.wait_for("SANE-42", 10);
    assert!(
        !s.contains("attention · layer"),
        "the app's screen is gone:\n{s}"
    );
}

#[test]
fn a_model_that_fails_to_load_is_shown_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("broken.gguf");
    std::fs::write(&bad, b"definitely not a gguf").unwrap();
    let t = Tmux::start(120, 40);
    let cmd = format!(
        "{} --model {}; echo RC=$?",
        common::bin().display(),
        bad.display()
    );
    t.keys(&[&cmd, "Enter"]);
    t.wait_for_all(&["could not start", "broken.gguf"], 30);
    t.keys(&["q"]);
    t.wait_for("RC=1", 10);
}

#[test]
fn a_failed_command_is_shown_and_the_next_one_works() {
    // The first request fits the 8,192-token context with 8,150 to generate; a new prompt
    // of a few words plus the chat template does not.
    let t = Tmux::start_app(160, 48, "", "--max-tokens 8150");
    t.keys(&["a"]);
    t.keys(&[
        "-l",
        "one two three four five six seven eight nine ten eleven twelve thirteen fourteen",
    ]);
    t.keys(&["Enter"]);
    t.wait_for("error: the prompt is", 30);
    t.keys(&["Space"]);
    t.wait_for("iteration 1 · prefill", 60);
    t.quit();
}

#[test]
fn an_engine_that_dies_is_shown_and_exits_non_zero_with_the_terminal_back() {
    let t = Tmux::start_app(160, 40, "INFERLAB_FAULT=engine-panic", "; echo RC=$?");
    t.keys(&["Space"]);
    t.wait_for_all(&["the engine stopped", "injected fault"], 30);
    t.keys(&["q"]);
    let s = t.wait_for("RC=1", 10);
    assert!(
        !s.contains(" inferlab · "),
        "the alternate screen is gone:\n{s}"
    );
    // The shell reads lines again: the terminal left raw mode.
    t.keys(&["echo cooked-$((1+1))", "Enter"]);
    t.wait_for("cooked-2", 10);
}

#[test]
fn closing_the_terminal_ends_the_app() {
    let marker = format!("hangup-{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("hup.jsonl");
    let t = Tmux::start_app(
        160,
        40,
        "",
        &format!("--prompt {marker} --record {}", rec.display()),
    );
    t.keys(&["Space"]);
    t.wait_for("iteration 1 ·", 30);
    t.keys(&["r"]);
    drop(t); // kills the tmux session: the app gets SIGHUP
    let alive = || {
        Command::new("pgrep")
            .args(["-f", &marker])
            .output()
            .map(|o| !o.stdout.is_empty())
            .unwrap_or(false)
    };
    let start = Instant::now();
    while alive() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the app outlived its terminal"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The recording so far is under the name given, and replays.
    let back = inferlab::worker::recording::read(&rec).unwrap();
    assert!(!back.reports.is_empty());
}

#[test]
fn a_lesson_opens_beside_the_panes_moves_with_n_and_saves_progress() {
    let model = common::real_model();
    let data = tempfile::tempdir().unwrap();
    let t = Tmux::start(150, 44);
    let cmd = format!(
        "INFERLAB_DATA_DIR={} {} lesson 5 --model {}",
        data.path().display(),
        common::bin().display(),
        model.display()
    );
    t.keys(&[&cmd, "Enter"]);
    t.wait_for_all(&["lesson 5/13 · step 1/5", "How SmolLM2 shares heads"], 60);
    // The step's task: prefill and three decode steps; space four times.
    t.wait_for("press space", 60);
    for i in 1..=4 {
        t.keys(&["Space"]);
        t.wait_for(&format!("iteration {i} ·"), 30);
    }
    t.wait_for("[x] Task:", 10);
    t.keys(&["n"]);
    t.wait_for("Switch to MHA", 10);
    // The step predicts before it switches: answering MHA's bytes per token (3× GQA's
    // 46,080) switches to MHA (the step's task), and the recomputed request grades the
    // answer. The choices are shuffled: the key is the digit before the figure.
    let screen = t.wait_for("138,240 bytes", 10);
    let line = screen
        .lines()
        .find(|l| l.contains("138,240 bytes"))
        .unwrap();
    let at = line.find("138,240 bytes").unwrap();
    let key = line[..at]
        .trim_end()
        .trim_end_matches('.')
        .chars()
        .last()
        .unwrap();
    assert!(key.is_ascii_digit(), "{line}");
    t.keys(&[&key.to_string()]);
    t.wait_for("9 query heads read 9 KV head(s)", 30);
    t.wait_for_all(&["[x] Task: Switch to MHA", "Right: under MHA"], 30);
    // The lesson list overlay.
    t.keys(&["L"]);
    t.wait_for("lessons · j k choose", 10);
    t.keys(&["Escape"]);
    t.wait_gone("lessons · j k choose", 10);
    t.quit();
    t.keys(&["echo DONE-$((1+1))", "Enter"]);
    t.wait_for("DONE-2", 10);
    let saved = std::fs::read_to_string(data.path().join("progress.json")).unwrap();
    let p: serde_json::Value = serde_json::from_str(&saved).unwrap();
    let l = &p["lessons"]["mha-gqa-mqa"];
    assert_eq!(l["step"], 1, "{saved}");
    assert_eq!(l["done_steps"], serde_json::json!([0, 1]), "{saved}");
}

#[test]
fn a_recorded_session_replays_without_the_model_and_scrubs() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("session.jsonl");
    let t = Tmux::start_app(220, 44, "", &format!("--record {}", rec.display()));
    for i in 1..=3 {
        t.keys(&["Space"]);
        t.wait_for(&format!("iteration {i} ·"), 30);
    }
    let live = t.screen();
    t.quit();
    t.keys(&["clear", "Enter"]);
    // Replay with no model available at all.
    let cmd = format!(
        "INFERLAB_MODEL=/nonexistent INFERLAB_OFFLINE=1 {} replay {}",
        common::bin().display(),
        rec.display()
    );
    t.keys(&[&cmd, "Enter"]);
    t.wait_for("(replay, 3 iterations)", 20);
    for i in 1..=3 {
        t.keys(&["Space"]);
        t.wait_for(&format!("iteration {i} ·"), 10);
    }
    let replayed = t.screen();
    // The same output pane text as live.
    let out = |s: &str| {
        s.lines()
            .find(|l| l.contains("sampled"))
            .map(str::to_string)
    };
    assert_eq!(
        out(&live),
        out(&replayed),
        "live:\n{live}\nreplay:\n{replayed}"
    );
    t.keys(&["["]);
    t.wait_for_all(&["HISTORY", "iteration 2 · decode"], 10);
    t.keys(&["[", "["]);
    t.wait_for("start of the session", 10);
    t.keys(&["]", "]", "]"]);
    t.wait_for("iteration 3 · decode", 10);
    t.quit();
    t.keys(&["echo OK-$((2*3))", "Enter"]);
    t.wait_for("OK-6", 10);
}

#[test]
fn look_at_view_sink_experiment_and_export_on_the_real_model() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tmux::start_app(
        160,
        48,
        &format!("INFERLAB_EXPORT_DIR={}", dir.path().display()),
        "--max-tokens 4",
    );
    t.keys(&["Space"]);
    t.wait_for("iteration 1 ·", 30);
    t.keys(&["Space"]);
    t.wait_for_all(&["iteration 2 ·", "prompt", "generated"], 30);
    // w: what the newest (generated) token looks at, ranked, with its split of mass.
    t.keys(&["w"]);
    t.wait_for_all(
        &[
            "what does",
            "generated) look at",
            "softmax mass on position 0",
            " 1. pos",
        ],
        10,
    );
    // e exports the focused (attention) pane.
    t.keys(&["w", "e"]);
    t.wait_for("exported attention", 20);
    let png = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy().to_string();
            n.starts_with("inferlab-attention-l") && n.ends_with("-iter2.png")
        })
        .expect("the attention pane's PNG");
    assert_eq!(&std::fs::read(&png).unwrap()[1..4], b"PNG");
    // x: the sink experiment reads the eval text; it keeps stepping after the 4-token
    // request has finished.
    t.keys(&["x"]);
    t.wait_for("attention sink: each step reads", 30);
    for i in 1..=4 {
        t.keys(&["Space"]);
        t.wait_for(&format!("token {i}/"), 30);
    }
    let s = t.screen();
    assert!(s.contains("finished"), "the request is done by now: {s}");
    assert!(s.contains("window + first page"), "{s}");
    t.keys(&["q"]);
}

/// The "cached now" line of the traffic pane.
fn cached_line(screen: &str) -> String {
    screen
        .lines()
        .find(|l| l.contains("cached now: live"))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn the_traffic_pane_watches_the_long_workload_pass_the_weights() {
    let data = tempfile::tempdir().unwrap();
    let t = Tmux::start_app(
        200,
        60,
        &format!("INFERLAB_DATA_DIR={}", data.path().display()),
        "",
    );
    // t: the traffic pane takes the forward pane's place, against this machine's limits
    // (measured at start into the data folder).
    t.keys(&["t", "Space"]);
    t.wait_for_all(
        &["memory traffic", "KV > weights past ≈", "roofline · ridge"],
        30,
    );
    assert!(data.path().join("machine.json").exists());
    // g: the long story's eight parts. Under GQA the batch starts below the crossover and
    // passes it while it decodes.
    t.keys(&["g"]);
    t.wait_for("serving workload restarted: The long story", 20);
    let mut below_seen = false;
    let passed = (0..80).any(|i| {
        t.keys(&["Space"]);
        t.wait_for(&format!("iteration {} ", i + 2), 60);
        let line = cached_line(&t.screen());
        let batch = line
            .split("batch read")
            .nth(1)
            .unwrap_or_default()
            .to_string();
        below_seen |= batch.contains("(below)");
        batch.contains("(past it)")
    });
    assert!(below_seen && passed, "{}", t.screen());
    // m (twice: GQA → MQA → MHA): under MHA the workload starts again and passes the
    // crossover within its prefill iterations.
    t.keys(&["m"]);
    t.wait_for(" · MQA · ", 60);
    t.keys(&["m"]);
    t.wait_for(" · MHA · ", 60);
    let passed_mha = (0..6).any(|_| {
        t.keys(&["Space"]);
        std::thread::sleep(Duration::from_millis(300));
        t.wait_for("memory traffic", 60);
        std::thread::sleep(Duration::from_secs(2));
        let line = cached_line(&t.screen());
        line.split("batch read")
            .nth(1)
            .is_some_and(|b| b.contains("past"))
    });
    assert!(passed_mha, "{}", t.screen());
    t.quit();
}

#[test]
fn z_gives_the_focused_pane_the_body_at_80x24() {
    let data = tempfile::tempdir().unwrap();
    let t = Tmux::start_app(
        80,
        24,
        &format!("INFERLAB_DATA_DIR={}", data.path().display()),
        "",
    );
    t.keys(&["Space"]);
    t.wait_for("iteration 1 ·", 30);
    // In the grid the attention pane shares its row with the output pane.
    let grid = t.screen();
    assert!(grid.contains("┐┌ output"), "{grid}");
    t.keys(&["z"]);
    let zoomed = t.wait_for_all(&["▸ output ·", "▸ serving ·", "▸ memory traffic ·"], 10);
    // The attention pane now spans the whole width: its top border ends at the edge.
    let top = zoomed
        .lines()
        .find(|l| l.starts_with("┌ attention"))
        .unwrap();
    assert_eq!(top.chars().count(), 80, "{zoomed}");
    assert!(
        top.ends_with('┐') && !zoomed.contains("┌ output"),
        "{zoomed}"
    );
    // tab moves the room to the next pane; z gives the grid back.
    t.keys(&["Tab"]);
    t.wait_for("▸ attention ·", 10);
    t.keys(&["z"]);
    t.wait_for("┐┌ output", 10);
    t.quit();
}

#[test]
fn a_finished_request_stalls_nothing_and_a_new_prompt_is_prefilled_by_space() {
    let t = Tmux::start_app(120, 40, "", "--max-tokens 2");
    // Prefill and one decode step: the 2-token request has finished.
    t.keys(&["Space"]);
    t.wait_for("iteration 1 · prefill", 30);
    t.keys(&["Space"]);
    t.wait_for("iteration 2 · finished", 30);
    // Space goes on stepping the serving workload beside the finished request.
    t.keys(&["Space"]);
    t.wait_for_all(
        &["iteration 3 · finished", "request finished (a: new prompt)"],
        30,
    );
    // Esc with nothing open does not quit.
    t.keys(&["Escape"]);
    t.wait_for("nothing to close: q quits", 10);
    // A new prompt, then space: it is prefilled.
    t.keys(&["a"]);
    t.keys(&["-l", "Name a colour."]);
    t.keys(&["Enter"]);
    t.wait_for("new request queued", 30);
    t.keys(&["Space"]);
    let s = t.wait_for("iteration 4 · prefill", 60);
    assert!(s.contains("Name a colour."), "{s}");
    t.quit();
}

#[test]
fn a_recording_that_runs_out_of_room_stays_said_and_fails_the_exit() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("full.jsonl");
    // An earlier recording, replaced with --force: a recording cut short must not take
    // its place.
    std::fs::write(&rec, "an earlier, whole recording\n").unwrap();
    let t = Tmux::start(200, 50);
    // A file size limit stands in for a full disk: writes past 24 KB fail (EFBIG). The
    // shell does not ignore SIGXFSZ for the app: the app must, and see the error as it
    // would see ENOSPC.
    t.keys(&["ulimit -f 24", "Enter"]);
    let data = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-data");
    let cmd = format!(
        "INFERLAB_DATA_DIR={} {} --model {} --record {} --force 2>{}; echo RC=$?",
        data.display(),
        common::bin().display(),
        common::real_model().display(),
        rec.display(),
        dir.path().join("stderr.txt").display()
    );
    t.keys(&[&cmd, "Enter"]);
    t.wait_for("ready: press space", 60);
    t.keys(&["Space"]);
    t.wait_for_all(&["recording stopped", "File too large"], 30);
    // The next iterations' statuses do not hide it.
    t.keys(&["Space"]);
    t.wait_for("iteration 2 ·", 30);
    t.keys(&["Space"]);
    t.wait_for_all(&["iteration 3 ·", "RECORDING STOPPED"], 30);
    t.keys(&["q"]);
    t.wait_for("RC=1", 20);
    let err = std::fs::read_to_string(dir.path().join("stderr.txt")).unwrap();
    assert!(
        err.contains("recording stopped") && err.contains(".partial"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&rec).unwrap(),
        "an earlier, whole recording\n"
    );
    // The next run to record there names what the stopped one left.
    let again = format!(
        "ulimit -f unlimited; INFERLAB_DATA_DIR={} {} --model {} --record {} --force 2>{}; echo RC2=$?",
        data.display(),
        common::bin().display(),
        common::real_model().display(),
        rec.display(),
        dir.path().join("stderr2.txt").display()
    );
    t.keys(&[&again, "Enter"]);
    t.wait_for("ready: press space", 60);
    t.keys(&["q"]);
    t.wait_for("RC2=0", 20);
    let err = std::fs::read_to_string(dir.path().join("stderr2.txt")).unwrap();
    assert!(
        err.contains(".partial") && err.contains("earlier recording"),
        "{err}"
    );
}

#[test]
fn the_app_runs_on_the_batched_route_and_says_so() {
    // The GPU's route, run on the CPU device: the header names it, the forward pane gives
    // the operations it launched, and the serving workload steps on slot tensors.
    let t = Tmux::start_app(200, 60, "", "--attention-route batched");
    t.keys(&["Space"]);
    t.wait_for_all(&["iteration 1 ·", "· batched ·"], 60);
    t.keys(&["Space"]);
    let s = t.wait_for_all(&["iteration 2 · decode", "attention batched ("], 60);
    assert!(s.contains("launches)"), "{s}");
    t.resize(80, 24);
    t.wait_for("batched", 10);
    t.quit();
}
