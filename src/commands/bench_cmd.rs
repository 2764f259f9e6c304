//! `inferlab bench ...`: side-by-side measurements.

use super::{load_model, model_path, DeviceArgs, ModelArgs, SourceArgs};
use anyhow::Result;
use inferlab::bench::{attention, decode, heads, kv, render, serve, sink};
use inferlab::machine;
use inferlab::serve::workload::LengthDist;
use inferlab::serve::Reserve;

/// Benchmarks.
#[derive(clap::Subcommand)]
pub enum Cmd {
    /// Prefill and decode tok/s: ours (capture off / one layer / all) vs candle's quantized_llama.
    Decode {
        #[command(flatten)]
        source: SourceArgs,
        #[command(flatten)]
        device: DeviceArgs,
        /// Tokens to decode per measurement.
        #[arg(long, default_value_t = 32, value_parser = sized(1, MOST_TOKENS))]
        tokens: usize,
        /// Rounds; each configuration runs once per round, interleaved, and the median counts.
        #[arg(long, default_value_t = 3, value_parser = sized(1, MOST_ROUNDS))]
        rounds: usize,
        /// Print one JSON object (snake_case keys) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// MHA vs GQA vs MQA on the same weights: KV bytes, requests that fit, decode speed, quality.
    Heads {
        #[command(flatten)]
        model: ModelArgs,
        /// KV memory budget for the "fit" column.
        #[arg(long, default_value = "512MiB")]
        budget: String,
        /// Tokens to decode for the speed column.
        #[arg(long, default_value_t = 32, value_parser = sized(1, MOST_TOKENS))]
        tokens: usize,
        /// Print one JSON object (snake_case keys) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// The KV cache's element type (f32, f16, int8): bytes per token, requests that fit,
    /// quality against f32, and paged vs contiguous serving tok/s.
    Kv(KvArgs),
    /// Attention sinks: perplexity with the full cache, a sliding window, and the window plus the first page.
    Sink {
        #[command(flatten)]
        model: ModelArgs,
        /// Tokens the windowed caches hold.
        #[arg(long, default_value_t = 128, value_parser = sized(1, MOST_TOKENS))]
        window: usize,
        /// Tokens per page (the unit of eviction, and the sink that is kept).
        #[arg(long, default_value_t = 16, value_parser = sized(1, MOST_PAGE))]
        page_size: usize,
        /// Print one JSON object (snake_case keys) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Static vs continuous batching and contiguous vs paged KV on one seeded workload.
    Serve(ServeArgs),
    /// This machine's limits: memory read bandwidth (one and all threads) and the compute
    /// peaks of our kernels' instruction mix; cached per CPU for the other benchmarks.
    Machine {
        /// Measure again even when a measurement of this CPU is cached.
        #[arg(long)]
        fresh: bool,
        /// Print one JSON object (snake_case keys) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Full-screen frame time of the app at 200×60 with real step reports.
    Render {
        #[command(flatten)]
        model: ModelArgs,
        /// Iterations of a real request before drawing (context grows with them).
        #[arg(long, default_value_t = 64, value_parser = sized(1, MOST_TOKENS))]
        steps: usize,
        #[arg(long, default_value_t = 300, value_parser = sized(1, 100_000))]
        frames: usize,
        /// Print one JSON object (snake_case keys) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Naive vs tiled (FlashAttention) attention: bytes moved and output difference, N = 128…4096.
    Attention {
        /// On-chip memory of the IO model, bytes (default: an A100 SM's 192 KiB, as in the paper).
        #[arg(long, default_value_t = inferlab::model::flash::A100_SRAM_BYTES,
              value_parser = sized(1, 1 << 30))]
        sram_bytes: usize,
        #[arg(long, default_value_t = 64, value_parser = sized(1, 1024))]
        head_dim: usize,
        /// Longest sequence (lengths double from 128). The naive kernel holds the whole
        /// N × N score matrix, so N stops at 16,384 (1 GiB of scores).
        #[arg(long, default_value_t = 4096, value_parser = sized(128, 16_384))]
        max_len: usize,
        /// Query tile rows (instead of the size derived from --sram-bytes).
        #[arg(long, requires = "block_k", value_parser = sized(1, 16_384))]
        block_q: Option<usize>,
        /// Key tile columns (instead of the size derived from --sram-bytes).
        #[arg(long, requires = "block_q", value_parser = sized(1, 16_384))]
        block_k: Option<usize>,
        /// Attend to every key (no causal mask), as in the paper's formulas.
        #[arg(long)]
        no_causal: bool,
        /// Print one JSON object (snake_case keys) instead of the table.
        #[arg(long)]
        json: bool,
    },
}

/// `bench kv`'s options.
#[derive(clap::Args)]
pub struct KvArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// KV memory budget for the "fit" column (requests of 1024 tokens).
    #[arg(long, default_value = "512MiB")]
    budget: String,
    /// Requests of the serving workload (uncapped continuous batching, paged and
    /// contiguous, every element type).
    #[arg(long, default_value_t = 16, value_parser = sized(1, MOST_REQUESTS))]
    requests: usize,
    /// KV memory of the serving runs, in tokens, the same for every type. Default: room
    /// for every request at its longest (prompt and answer at their maximum), so paged and
    /// contiguous admit them alike and run the same schedule, and their ratio is what
    /// reading through pages costs. Under a tighter budget the contiguous cache's
    /// reservations hold some requests back, and the ratio also weighs two schedules.
    #[arg(long, value_parser = sized(1, MOST_KV_TOKENS))]
    kv_tokens: Option<usize>,
    /// Rounds; the median counts. In each, paged and contiguous serve in lock-step, one
    /// iteration of each in turn, and take turns at going first (an even count favours
    /// neither).
    #[arg(long, default_value_t = 4, value_parser = sized(1, MOST_ROUNDS))]
    rounds: usize,
    /// Print one JSON object (snake_case keys) instead of the table.
    #[arg(long)]
    json: bool,
}

/// `bench serve`'s options: the seeded workload, the KV budget and the batch cap.
#[derive(clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[arg(long, default_value_t = 32, value_parser = sized(1, MOST_REQUESTS))]
    requests: usize,
    #[arg(long, default_value_t = 16, value_parser = sized(1, MOST_TOKENS))]
    prompt_min: usize,
    #[arg(long, default_value_t = 128, value_parser = sized(1, MOST_TOKENS))]
    prompt_max: usize,
    #[arg(long, default_value_t = 8, value_parser = sized(1, MOST_TOKENS))]
    output_min: usize,
    #[arg(long, default_value_t = 256, value_parser = sized(1, MOST_TOKENS))]
    output_max: usize,
    /// How max output lengths spread over their range: uniform, or log-uniform (many
    /// short answers and a few long ones, the skew of real chat traffic, which is where
    /// a rigid static batch loses most).
    #[arg(long, value_enum, default_value_t = LengthDist::Uniform)]
    output_dist: LengthDist,
    /// KV memory, in tokens, for every configuration. The default is below what the
    /// workload's 32 requests need at once, so memory, not the request count, limits
    /// the uncapped pair.
    #[arg(long, default_value_t = 2560, value_parser = sized(1, MOST_KV_TOKENS))]
    kv_tokens: usize,
    #[arg(long, default_value_t = 16, value_parser = sized(2, MOST_PAGE))]
    page_size: usize,
    /// What the contiguous cache reserves per request: prompt + max new tokens, or the
    /// model's whole context (as servers sized for the longest request did).
    #[arg(long, value_enum, default_value_t = Reserve::PromptPlusMaxNew)]
    reserve: Reserve,
    /// Most requests per iteration in the static vs continuous pair (below the request
    /// count, so static batches must wait); the contiguous vs paged pair has no cap.
    #[arg(long, default_value_t = 8, value_parser = sized(1, MOST_REQUESTS))]
    max_batch: usize,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Requests per second of the arrivals part (a Poisson process). Default: the rate at
    /// which continuous batching is busy about 70% of the time, estimated from this
    /// machine's measured prefill and decode step costs, then corrected by a run of
    /// continuous batching at the estimate (printed with the result).
    #[arg(long, value_parser = rate)]
    rate: Option<f64>,
    /// Prompt tokens per iteration of the arrivals part's chunked-prefill run.
    #[arg(long, default_value_t = inferlab::bench::arrivals::CHUNK_TOKENS,
          value_parser = sized(1, MOST_TOKENS))]
    chunk_tokens: usize,
    /// Seeded arrival sequences (from --seed on) the arrivals part runs under every policy
    /// and pools, so its p99s are not one run's slowest request or two.
    #[arg(long, default_value_t = 3, value_parser = sized(1, 64))]
    arrival_seeds: usize,
    /// A running server (llama.cpp's, from scripts/llamacpp-server.py) to run the arrivals
    /// on beside ours: the same requests sent in real time, streamed and timed by us. Ours
    /// then runs with the server's slot count as its batch cap.
    #[arg(long, value_name = "URL")]
    peer: Option<String>,
    /// Print one JSON object (snake_case keys) instead of the table.
    #[arg(long)]
    json: bool,
}

/// Tokens of one request's prompt or output, a window, or steps before drawing: SmolLM2's
/// context is 8,192, and a benchmark past it is refused below with the model's own figure.
const MOST_TOKENS: u64 = 1 << 16;
/// Requests of a workload, and a batch cap.
const MOST_REQUESTS: u64 = 4096;
/// KV memory of a serving run in tokens: 65,536 tokens are 3 GB under GQA in f32 and
/// 9 GB under MHA, within this kind of machine.
const MOST_KV_TOKENS: u64 = 1 << 16;
/// Slots per page.
const MOST_PAGE: u64 = inferlab::report::limits::PAGE_SIZE as u64;
const MOST_ROUNDS: u64 = 50;

/// A size flag's parser: refused, with the flag's name and the bound, before anything is
/// allocated for it.
fn sized(lo: u64, hi: u64) -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::new().range(lo..=hi)
}

/// `--rate`: requests per second, positive and finite.
pub(crate) fn rate(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 && r <= 1e6 => Ok(r),
        Ok(_) => Err("a rate is a number of requests per second above 0 and at most 1e6".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs a benchmark.
pub fn run(cmd: &Cmd) -> Result<()> {
    match cmd {
        Cmd::Decode {
            source,
            device,
            tokens,
            rounds,
            json,
        } => {
            let (path, _) = model_path(source)?;
            let report = decode::run(&path, &device.device()?, *tokens, (*rounds).max(1), !json)?;
            emit(*json, &report, format!("{}\n", report.table()))?;
        }
        Cmd::Heads {
            model: margs,
            budget,
            tokens,
            json,
        } => {
            let budget =
                inferlab::budget::parse_bytes(budget).map_err(anyhow::Error::msg)? as usize;
            let model = load_model(margs)?;
            let r = heads::run(&model, budget, *tokens)?;
            emit(*json, &r, r.table())?;
        }
        Cmd::Serve(a) => serve_cmd(a)?,
        Cmd::Kv(a) => kv_cmd(a)?,
        Cmd::Sink {
            model: margs,
            window,
            page_size,
            json,
        } => sink_cmd(margs, *window, *page_size, *json)?,
        Cmd::Machine { fresh, json } => {
            let m = if *fresh {
                machine::measure()
            } else {
                machine::get()
            }?;
            emit(*json, &m, m.table())?;
        }
        Cmd::Render {
            model: margs,
            steps,
            frames,
            json,
        } => {
            anyhow::ensure!(*frames > 0, "--frames must be at least 1");
            let model = load_model(margs)?;
            let r = render::run(&model, *steps, *frames)?;
            emit(*json, &r, r.table())?;
        }
        Cmd::Attention { .. } => attention_cmd(cmd)?,
    }
    Ok(())
}

/// `bench kv`: every element type of the cache on the same model and workload.
fn kv_cmd(a: &KvArgs) -> Result<()> {
    let budget_bytes =
        inferlab::budget::parse_bytes(&a.budget).map_err(anyhow::Error::msg)? as usize;
    // `bench serve`'s standard lengths and seed, checked as `bench serve` checks them.
    let d = inferlab::serve::workload::Workload::default();
    let w = workload(
        a.requests,
        (d.prompt_min, d.prompt_max),
        (d.output_min, d.output_max),
        d.output_dist,
        d.seed,
    )?;
    // Whole pages per request, as the pool hands them out.
    let per_request = (w.prompt_max + w.output_max).div_ceil(kv::PAGE_SIZE) * kv::PAGE_SIZE;
    let longest = w.requests.saturating_mul(per_request);
    let kv_tokens = a.kv_tokens.unwrap_or(longest);
    anyhow::ensure!(
        kv_tokens >= per_request,
        "--kv-tokens {kv_tokens} cannot hold one request at its longest ({per_request} tokens in pages of {}): no request could complete",
        kv::PAGE_SIZE
    );
    let model = load_model(&a.model)?;
    // Quality is measured where nothing but the cache rounds: the same file, f32 weights.
    let exact = match a.model.weights.as_deref() {
        Some("f32") => model.clone(),
        _ => load_model(&ModelArgs {
            weights: Some("f32".into()),
            ..a.model.clone()
        })?,
    };
    let bench = kv::KvBench {
        budget_bytes,
        workload: w,
        kv_budget_tokens: kv_tokens,
        rounds: a.rounds.max(1),
    };
    let r = kv::run(&model, &exact, &bench)?;
    emit(a.json, &r, r.table())
}

/// `bench sink`: the eval text through a full cache and the two windows.
fn sink_cmd(margs: &ModelArgs, window: usize, page_size: usize, json: bool) -> Result<()> {
    let model = load_model(margs)?;
    let tokens = model
        .tokenizer
        .encode(inferlab::assets::EVAL_TEXT.trim())
        .map_err(anyhow::Error::msg)?;
    let r = sink::run(&model, &tokens, window, page_size)?;
    emit(json, &r, r.table())
}

/// `bench attention`: naive against tiled attention's traffic over context lengths.
fn attention_cmd(cmd: &Cmd) -> Result<()> {
    let Cmd::Attention {
        sram_bytes,
        head_dim,
        max_len,
        block_q,
        block_k,
        no_causal,
        json,
    } = cmd
    else {
        return Ok(());
    };
    let lengths = attention_lengths(*max_len)?;
    let tiles = explicit_tiles(*block_q, *block_k, lengths[0])?;
    let r = attention::run(&lengths, *head_dim, *sram_bytes, tiles, !no_causal)?;
    emit(*json, &r, r.table())
}

/// `bench serve`: the seeded workload under every policy and cache.
fn serve_cmd(a: &ServeArgs) -> Result<()> {
    // The peer first: a server that does not answer fails the bench before it runs.
    let peer = match &a.peer {
        Some(url) => {
            let base = inferlab::attach::http::Base::parse(url)?;
            let slots = inferlab::bench::peer::slots(&base)?;
            Some((base, slots))
        }
        None => None,
    };
    let max_batch = peer.as_ref().map_or(a.max_batch, |(_, n)| *n);
    let arrivals = inferlab::bench::arrivals::ArrivalsArgs {
        rate: a.rate,
        seeds: a.arrival_seeds,
        chunk_tokens: a.chunk_tokens,
        peer,
    };
    arrivals.check()?;
    let w = workload(
        a.requests,
        (a.prompt_min, a.prompt_max),
        (a.output_min, a.output_max),
        a.output_dist,
        a.seed,
    )?;
    let model = load_model(&a.model)?;
    serve_fits(a, model.cfg.context)?;
    let r = serve::run(
        &model,
        &w,
        a.kv_tokens,
        a.page_size,
        a.reserve,
        max_batch,
        arrivals,
    )?;
    let runs = [
        ("one request at a time", Some(&r.request_at_a_time)),
        ("static batching", Some(&r.static_)),
        ("continuous batching", Some(&r.continuous)),
        ("the contiguous cache", Some(&r.contiguous)),
        ("the paged cache", Some(&r.paged)),
        (
            "the paged cache of small pages",
            r.paged_small_pages.as_ref(),
        ),
    ];
    for (name, run) in runs {
        if let Some(run) = run.filter(|f| f.generated_tokens == 0) {
            anyhow::bail!(
                "no request completed under {name} ({} iterations): no ratio can be given",
                run.iterations
            );
        }
    }
    emit(a.json, &r, r.table())
}

/// Refuses a `bench serve` workload that could not run: a request past the model's
/// context, or one whose longest form (or, with `--reserve context`, the context) does not
/// fit the KV memory at all.
fn serve_fits(a: &ServeArgs, context: usize) -> Result<()> {
    let longest = a.prompt_max + a.output_max;
    anyhow::ensure!(
        longest <= context,
        "--prompt-max {} plus --output-max {} is {longest} tokens, past the model's context of {context}",
        a.prompt_max,
        a.output_max
    );
    let pages = longest.div_ceil(a.page_size) * a.page_size;
    let reserved = match a.reserve {
        Reserve::Context => context,
        _ => longest,
    };
    let need = pages.max(reserved);
    anyhow::ensure!(
        need <= a.kv_tokens,
        "--kv-tokens {} cannot hold one request at its longest ({need} tokens{}): no request could complete",
        a.kv_tokens,
        if a.reserve == Reserve::Context { ", a whole context reserved" } else { "" }
    );
    Ok(())
}

/// `bench attention`'s tile sizes when both were given (else the SRAM budget sizes them).
fn explicit_tiles(
    block_q: Option<usize>,
    block_k: Option<usize>,
    len: usize,
) -> Result<Option<inferlab::model::flash::Tiles>> {
    Ok(match (block_q, block_k) {
        (Some(q), Some(k)) => Some(inferlab::model::flash::Tiles::explicit(q, k, len)?),
        _ => None,
    })
}

/// `bench serve`'s seeded workload, its length ranges checked.
fn workload(
    requests: usize,
    (prompt_min, prompt_max): (usize, usize),
    (output_min, output_max): (usize, usize),
    output_dist: LengthDist,
    seed: u64,
) -> Result<inferlab::serve::workload::Workload> {
    anyhow::ensure!(requests > 0, "--requests must be at least 1");
    anyhow::ensure!(
        prompt_min <= prompt_max && output_min <= output_max && prompt_min > 0 && output_min > 0,
        "length ranges must be non-empty and start at 1 or more"
    );
    Ok(inferlab::serve::workload::Workload {
        requests,
        prompt_min,
        prompt_max,
        output_min,
        output_max,
        output_dist,
        mean_gap: 0.0,
        rate_per_s: 0.0,
        seed,
    })
}

/// `bench attention`'s sequence lengths: doubling from 128 up to `max_len`.
fn attention_lengths(max_len: usize) -> Result<Vec<usize>> {
    let lengths: Vec<usize> = std::iter::successors(Some(128usize), |n| n.checked_mul(2))
        .take_while(|&n| n <= max_len)
        .collect();
    anyhow::ensure!(!lengths.is_empty(), "--max-len must be at least 128");
    Ok(lengths)
}

/// Prints a bench result: one JSON object for scripts, or the table for people.
fn emit<T: serde::Serialize>(json: bool, report: &T, table: String) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print!("{table}");
    }
    Ok(())
}
