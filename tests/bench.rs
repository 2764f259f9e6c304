//! Every bench prints one JSON object with the keys scripts rely on.

mod common;

use std::process::Command;

fn json(args: &[&str]) -> serde_json::Value {
    // The machine's measured limits are cached here, not in the user's data directory.
    let data = tempfile::tempdir().unwrap();
    let o = Command::new(common::bin())
        .args(args)
        .env("INFERLAB_QUIET", "1")
        .env("INFERLAB_DATA_DIR", data.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("one JSON object on stdout")
}

#[test]
fn bench_attention_json() {
    let v = json(&["bench", "attention", "--json", "--max-len", "512"]);
    let r = v["results"].as_array().unwrap();
    assert_eq!(
        r.iter()
            .map(|x| x["seq_len"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![128, 256, 512]
    );
    for x in r {
        assert!(x["tiled"]["bytes"].as_u64().unwrap() < x["naive"]["bytes"].as_u64().unwrap());
        assert!(x["max_abs_diff"].as_f64().unwrap() < 1e-5);
        assert!(x["naive"]["ms"].is_number() && x["tiled"]["ms"].is_number());
    }
}

#[test]
fn bench_decode_json() {
    let model = common::real_model();
    let m = model.to_str().unwrap();
    let v = json(&[
        "bench", "decode", "--model", m, "--json", "--rounds", "1", "--tokens", "4",
    ]);
    for k in [
        "ours",
        "ours_capture_one_layer",
        "ours_capture_all",
        "candle_quantized_llama",
    ] {
        assert!(v[k]["prefill_tok_per_s"].as_f64().unwrap() > 0.0, "{k}");
        assert!(v[k]["decode_tok_per_s"].as_f64().unwrap() > 0.0, "{k}");
    }
    // What a decode token reads, and how much of the read bandwidth that uses: the
    // weights are ~0.14 GB of Q8_0 for SmolLM2-135M.
    let bytes = v["weight_bytes_per_token"].as_u64().unwrap();
    assert!((100_000_000..200_000_000).contains(&bytes), "{bytes}");
    let f = v["decode_read_bandwidth_fraction"].as_f64().unwrap();
    assert!(f > 0.0 && f < 1.5, "{f}");
    assert!(v["read_gb_per_s"].as_f64().unwrap() > 0.0);
    // Per weight type, the decode lever: fewer bytes, faster steps, and what it costs.
    let w = &v["weights"];
    for k in ["f32", "q8_0", "q4"] {
        for key in [
            "weight_bytes_per_token",
            "tok_per_s",
            "fraction_of_bandwidth",
            "perplexity",
            "top1_agreement_vs_f32",
        ] {
            assert!(w[k][key].as_f64().unwrap() > 0.0, "{k}.{key}");
        }
    }
    let bytes = |k: &str| w[k]["weight_bytes_per_token"].as_u64().unwrap();
    assert!(bytes("q4") < bytes("q8_0") && bytes("q8_0") < bytes("f32"));
    assert_eq!(w["f32"]["top1_agreement_vs_f32"].as_f64(), Some(1.0));
    // The app's weights are 4-bit in the file: Q4 on our kernel is as good as Q8_0.
    assert!(
        w["q4"]["perplexity"].as_f64().unwrap() < 1.05 * w["f32"]["perplexity"].as_f64().unwrap()
    );
}

#[test]
fn bench_machine_json() {
    let v = json(&["bench", "machine", "--json", "--fresh"]);
    for k in [
        "read_gb_per_s",
        "read_gb_per_s_one_thread",
        "int8_gmac_per_s",
        "f32_gflop_per_s",
        "q8_kernel_gmac_per_s",
    ] {
        assert!(v[k].as_f64().unwrap() > 0.0, "{k}: {v}");
    }
    // No ordering between the figures is asserted: they are timings, and the other tests in
    // this binary share the two cores with them (CI once read 16.5 GB/s on all threads
    // against 26.5 on one). The benchmark's own table is where they are compared.
    assert!(!v["cpu"].as_str().unwrap().is_empty());
    assert!(v["features"].is_array());
}

#[test]
fn bench_heads_figures() {
    let m = inferlab::model::Model::load(&common::real_model(), &Default::default()).unwrap();
    let r = inferlab::bench::heads::run(&m, 512 << 20, 2).unwrap();
    let v = serde_json::to_value(&r).unwrap();
    for k in ["mha", "gqa", "mqa"] {
        for f in [
            "kv_bytes_per_token",
            "max_concurrent",
            "decode_tok_per_s",
            "top1_agreement",
            "mean_kl",
            "perplexity",
        ] {
            assert!(v[k][f].is_number(), "{k}.{f}");
        }
    }
    let bpt = |k: &str| v[k]["kv_bytes_per_token"].as_u64().unwrap();
    assert_eq!(bpt("mha"), 3 * bpt("gqa"));
    assert_eq!(bpt("gqa"), 3 * bpt("mqa"));
    assert_eq!(bpt("gqa"), 30 * 2 * 3 * 64 * 4);
    // MHA is the same function as GQA; MQA by pooling is not.
    assert_eq!(v["mha"]["top1_agreement"].as_f64().unwrap(), 1.0);
    assert!(v["mha"]["mean_kl"].as_f64().unwrap() < 1e-6);
    assert!(v["mqa"]["mean_kl"].as_f64().unwrap() > 0.01);
    assert!(v["mqa"]["max_concurrent"].as_u64() > v["gqa"]["max_concurrent"].as_u64());
    // The trained model on ordinary English text: a sane perplexity.
    let ppl = v["gqa"]["perplexity"].as_f64().unwrap();
    assert!(ppl > 1.0 && ppl < 200.0, "{ppl}");
}

/// The cache's element types on the real model through the command line: bytes halve and
/// then nearly halve again, twice and four times the requests fit, and the rounding costs
/// what the issue allows (f16 ≥ 99.5% and int8 ≥ 98% top-1 agreement with f32).
#[test]
fn bench_kv_json_sizes_and_quality_by_element_type() {
    let v = json(&["bench", "kv", "--json", "--rounds", "1", "--requests", "2"]);
    // Without --kv-tokens, room for both requests at their longest (prompt 128 + 256 new):
    // paged and contiguous then admit alike and run the same schedule.
    assert_eq!(v["kv_budget_tokens"], 2 * (128 + 256), "{v}");
    for k in ["f32", "f16", "int8"] {
        for f in [
            "bytes_per_token",
            "crossover_tokens",
            "requests_fit",
            "top1_agreement",
            "kl",
            "perplexity",
            "paged_tok_per_s",
            "contiguous_tok_per_s",
            "paged_over_contiguous",
        ] {
            assert!(v[k][f].is_number(), "{k}.{f}");
        }
    }
    let u = |k: &str, f: &str| v[k][f].as_u64().unwrap();
    let x = |k: &str, f: &str| v[k][f].as_f64().unwrap();
    // 30 layers × K and V × 3 KV heads × one row of 64: 4 bytes each, 2, or 1 plus a
    // 4-byte scale per row.
    assert_eq!(u("f32", "bytes_per_token"), 30 * 2 * 3 * 64 * 4);
    assert_eq!(u("f16", "bytes_per_token"), 30 * 2 * 3 * 64 * 2);
    assert_eq!(u("int8", "bytes_per_token"), 30 * 2 * 3 * (64 + 4));
    assert_eq!(u("f16", "requests_fit"), 2 * u("f32", "requests_fit"));
    assert!(u("int8", "crossover_tokens") > 3 * u("f32", "crossover_tokens"));
    assert_eq!(x("f32", "top1_agreement"), 1.0);
    assert!(x("f16", "top1_agreement") >= 0.995, "{v}");
    assert!(x("int8", "top1_agreement") >= 0.98, "{v}");
    assert!(
        x("int8", "kl") > x("f16", "kl"),
        "int8 rounds more than f16: {v}"
    );
}

#[test]
fn budget_json_and_errors() {
    let v = json(&[
        "budget",
        "--preset",
        "llama-3-8b",
        "--memory",
        "80GB",
        "--seq-len",
        "8192",
        "--json",
    ]);
    // 32 layers × 2 × 8 KV heads × 128 × 2 bytes = 131,072 bytes per token.
    assert_eq!(v["lines"][0]["kv_bytes_per_token"], 131072);
    assert_eq!(v["lines"][1]["kv_bytes_per_token"], 524288);
    let o = Command::new(common::bin())
        .args(["budget", "--preset", "gpt-9"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown preset `gpt-9`"));
}

#[test]
fn bench_sink_json_shows_the_sink_on_the_real_model() {
    let model = common::real_model();
    let m = model.to_str().unwrap();
    let v = json(&["bench", "sink", "--model", m, "--json", "--window", "96"]);
    let p = |k: &str| v[k]["perplexity"].as_f64().unwrap();
    let (full, window, sink) = (p("full"), p("window"), p("window_sink"));
    assert!(full > 1.0 && window.is_finite() && sink.is_finite());
    // Dropping the first page hurts far more than keeping it: the StreamingLLM finding.
    assert!(window > sink * 1.2, "window {window} vs window+sink {sink}");
    assert!(v["window"]["evicted_pages"].as_u64().unwrap() > 0);
    assert!(v["window_sink"]["cached_tokens"].as_u64().unwrap() <= 96);
}

#[test]
fn bench_serve_json_has_the_keys_and_the_paged_pool_holds_more() {
    let model = common::real_model();
    let m = model.to_str().unwrap();
    let v = json(&[
        "bench",
        "serve",
        "--model",
        m,
        "--json",
        "--requests",
        "8",
        "--prompt-min",
        "8",
        "--prompt-max",
        "24",
        "--output-min",
        "8",
        "--output-max",
        "24",
        "--kv-tokens",
        "128",
        "--page-size",
        "4",
        "--max-batch",
        "3",
        "--arrival-seeds",
        "2",
        "--chunk-tokens",
        "16",
    ]);
    // The baseline runs one request at a time, and continuous batching beats it.
    assert_eq!(
        v["request_at_a_time"]["peak_concurrent"].as_u64().unwrap(),
        1
    );
    let ratio = v["continuous_over_request_at_a_time"].as_f64().unwrap();
    let want = v["continuous"]["tok_per_s"].as_f64().unwrap()
        / v["request_at_a_time"]["tok_per_s"].as_f64().unwrap();
    assert!(
        (ratio - want).abs() < 1e-9 * want.max(1.0),
        "{ratio} vs {want}"
    );
    // Whether it is faster in tok/s is a timing, left to the table; that it needs fewer
    // steps for the same tokens is not.
    assert!(ratio > 0.0, "{ratio}");
    let iterations = |k: &str| v[k]["iterations"].as_u64().unwrap();
    assert!(
        iterations("continuous") < iterations("request_at_a_time"),
        "{v}"
    );
    for k in ["static", "continuous", "contiguous", "paged"] {
        assert!(v[k]["tok_per_s"].as_f64().unwrap() > 0.0, "{k}");
        assert!(v[k]["kv_utilization_pct"].as_f64().unwrap() > 0.0, "{k}");
        assert!(v[k]["peak_concurrent"].as_u64().unwrap() >= 1, "{k}");
    }
    assert!(v["preemptions"].is_u64());
    // A rigid batch never needs fewer iterations than the same requests kept busy.
    let ceiling = v["continuous_over_static_ceiling"].as_f64().unwrap();
    assert!(ceiling >= 1.0 && ceiling.is_finite(), "{ceiling}");
    let steps = v["step_ms_by_batch"].as_object().unwrap();
    assert_eq!(
        steps
            .keys()
            .map(|k| k.parse::<usize>().unwrap())
            .collect::<std::collections::BTreeSet<_>>(),
        [1, 2, 4, 8, 16, 32].into_iter().collect()
    );
    // The matrix work of each step against the int8 peak: bigger batches do more per
    // second (by ~6× here), and each fraction is that step's GMAC/s over the peak. The
    // peak is not compared with the steps: it may have been measured while other tests
    // held the cores.
    let g = |b: &str| v["gmac_per_s_by_batch"][b].as_f64().unwrap();
    assert!(g("32") > g("1"), "{} vs {}", g("32"), g("1"));
    let peak = v["int8_gmac_per_s"].as_f64().unwrap();
    assert!(peak > 0.0);
    for (b, f) in v["int8_peak_fraction_by_batch"].as_object().unwrap() {
        let f = f.as_f64().unwrap();
        assert!(f > 0.0 && (f - g(b) / peak).abs() < 1e-9, "B={b}: {f}");
    }
    // The capped pair never runs more than --max-batch at once; the uncapped pair is
    // limited by KV memory, where pages (no up-front reservation) hold more requests.
    assert!(v["static"]["peak_concurrent"].as_u64().unwrap() <= 3);
    assert!(v["continuous"]["peak_concurrent"].as_u64().unwrap() <= 3);
    let (c, p) = (
        v["contiguous"]["peak_concurrent"].as_u64().unwrap(),
        v["paged"]["peak_concurrent"].as_u64().unwrap(),
    );
    assert!(p > c, "paged {p} vs contiguous {c}");
    assert!(
        v["paged"]["kv_utilization_pct"].as_f64().unwrap()
            > v["contiguous"]["kv_utilization_pct"].as_f64().unwrap()
    );
    // Static batching keeps finished rows in its rigid batch; continuous never pads.
    assert!(v["static"]["padding_rows"].as_u64().unwrap() > 0);
    assert_eq!(v["continuous"]["padding_rows"].as_u64(), Some(0));
    assert_eq!(v["workload"]["output_dist"], "uniform");
    // The same kind of requests arriving over time: every policy's latency figures, at
    // one rate derived from this machine's costs.
    let a = &v["arrivals"];
    assert!(a["rate_per_s"].as_f64().unwrap() > 0.0, "{a}");
    // The default rate is a first estimate scaled by how busy continuous batching really
    // was at it, toward 70%.
    let first = &a["first_estimate"];
    let (r0, busy0) = (
        first["rate_per_s"].as_f64().unwrap(),
        first["busy_pct"].as_f64().unwrap(),
    );
    assert!(busy0 > 0.0 && busy0 <= 100.0, "{first}");
    let want = r0 * 70.0 / busy0;
    let rate = a["rate_per_s"].as_f64().unwrap();
    assert!((rate - want).abs() < 1e-9 * want, "{rate} vs {want}");
    // How busy the corrected run was is a timing, and other tests share the cores: it is
    // left to the table (this machine measured 70-77% after first runs at 56-60%).
    assert!(
        first["work_ms_per_request"].as_f64().unwrap() > 0.0,
        "{first}"
    );
    assert_eq!(a["chunk_tokens"], 16);
    // Two seeded sequences of two dozen requests, pooled: a quarter of them long.
    assert_eq!(a["seeds"], 2);
    assert_eq!(a["requests"], 48);
    assert_eq!(a["long_prompts"], 12);
    for k in [
        "static",
        "continuous",
        "continuous_chunked",
        "request_at_a_time",
    ] {
        let f = |key: &str| a[k][key].as_f64().unwrap();
        assert!(f("tok_per_s") > 0.0, "{k}");
        assert!(f("work_ms_per_request") > 0.0, "{k}");
        // The engine waits between arrivals, so it is busy only part of its clock.
        assert!(f("busy_pct") > 0.0 && f("busy_pct") <= 100.0, "{k}");
        assert!(
            f("ttft_ms_p99") >= f("ttft_ms_p50") && f("ttft_ms_p50") > 0.0,
            "{k}"
        );
        assert!(
            f("itl_ms_p99") >= f("itl_ms_p50") && f("itl_ms_p50") > 0.0,
            "{k}"
        );
    }
    // The short prompts alone: both batching policies, at a rate of their own (no long
    // prefill to pay for, so more requests per second keep the engine as busy).
    let c = &a["chat_mix"];
    assert!(
        c["rate_per_s"].as_f64().unwrap() > a["rate_per_s"].as_f64().unwrap(),
        "{c}"
    );
    for k in ["static", "continuous"] {
        assert!(c[k]["ttft_ms_p99"].as_f64().unwrap() > 0.0, "{c}");
    }
    assert!(
        c["static_over_continuous_ttft_p99"].as_f64().unwrap() > 0.0,
        "{c}"
    );
    // Chunks spread each long prompt over more iterations.
    let it = |k: &str| a[k]["iterations"].as_u64().unwrap();
    assert!(it("continuous_chunked") > it("continuous"), "{a}");
    // Smaller pages leave less of each last page empty.
    assert_eq!(v["small_page_size"], 2);
    assert!(
        v["paged_small_pages"]["kv_utilization_pct"]
            .as_f64()
            .unwrap()
            >= v["paged"]["kv_utilization_pct"].as_f64().unwrap()
    );
}

#[test]
fn decode_report_on_a_gpu_gives_no_fraction_of_the_cpus_bandwidth() {
    use inferlab::bench::decode::{DecodeReport, Speed};
    let speed = Speed {
        prefill_tok_per_s: 1000.0,
        decode_tok_per_s: 100.0,
    };
    let report = |fraction| DecodeReport {
        prompt_tokens: 53,
        decode_tokens: 32,
        rounds: 1,
        configs: [("ours".to_string(), speed.clone())].into(),
        weight_bytes_per_token: 142_884_864,
        read_gb_per_s: 30.0,
        machine_age_s: Some(1),
        decode_read_bandwidth_fraction: fraction,
        weights: Default::default(),
    };
    let cpu = report(Some(0.48));
    assert!(cpu.table().contains("48% of this machine's 30.0 GB/s"));
    let v = serde_json::to_value(&cpu).unwrap();
    assert_eq!(v["decode_read_bandwidth_fraction"].as_f64(), Some(0.48));
    // On a GPU the weights stream from the GPU's memory, which `bench machine` does not measure.
    let gpu = report(None);
    let t = gpu.table();
    assert!(t.contains("14.3 GB/s from the GPU's memory"), "{t}");
    assert!(!t.contains('%'), "{t}");
    let v = serde_json::to_value(&gpu).unwrap();
    assert!(v.get("decode_read_bandwidth_fraction").is_none());
}

/// A benchmark that could not run says so: a size past its bound is refused by name
/// before anything is allocated, a workload no request of which could complete is
/// refused with the reason, and nothing prints NaN or exits 0.
#[test]
fn a_benchmark_that_cannot_run_is_refused_by_name() {
    let model = common::real_model();
    let m = model.to_str().unwrap();
    let data = tempfile::tempdir().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["attention", "--head-dim", "0"], "--head-dim"),
        (&["attention", "--max-len", "99999999999"], "--max-len"),
        (
            &["attention", "--block-q", "0", "--block-k", "8"],
            "--block-q",
        ),
        (&["serve", "--requests", "4000000000"], "--requests"),
        (&["serve", "--kv-tokens", "9999999999"], "--kv-tokens"),
        (
            &["serve", "--arrival-seeds", "1000000000"],
            "--arrival-seeds",
        ),
        (&["serve", "--rate", "nan"], "--rate"),
        (&["serve", "--page-size", "0"], "--page-size"),
        (&["kv", "--requests", "0"], "--requests"),
        (&["decode", "--tokens", "0"], "--tokens"),
        (&["render", "--frames", "0"], "--frames"),
        (&["sink", "--window", "0"], "--window"),
        // Past what the model or the KV memory can hold: said, with the figures.
        (
            &["serve", "--model", m, "--kv-tokens", "16"],
            "no request could complete",
        ),
        (
            &["serve", "--model", m, "--prompt-max", "9000"],
            "past the model's context",
        ),
        (
            &["serve", "--model", m, "--reserve", "context"],
            "a whole context reserved",
        ),
        (
            &["kv", "--model", m, "--kv-tokens", "16"],
            "no request could complete",
        ),
        (
            &["decode", "--model", m, "--tokens", "9000"],
            "past the model's context",
        ),
        (
            &["heads", "--model", m, "--tokens", "9000"],
            "past the model's context",
        ),
    ];
    for (args, says) in cases {
        let o = Command::new(common::bin())
            .arg("bench")
            .args(*args)
            .env("INFERLAB_QUIET", "1")
            .env("INFERLAB_DATA_DIR", data.path())
            .output()
            .unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert!(!o.status.success(), "{args:?} exited 0:\n{out}{err}");
        assert!(err.contains(says), "{args:?} does not say {says:?}:\n{err}");
        assert!(
            !out.contains("NaN") && !err.contains("NaN"),
            "{args:?}:\n{out}{err}"
        );
    }
}
