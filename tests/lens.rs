//! The logit lens: every layer's newest residual read out through the final RMSNorm and
//! the LM head. Its last row is the model's own prediction; it runs only when asked; the
//! pane, the picture and `trace --json` show it.

mod common;

use common::*;
use inferlab::model::sampler::SamplerConfig;
use inferlab::model::session::{LensRow, Session};
use inferlab::views::lens::forms_at;
use std::process::Command;

#[test]
fn the_last_layer_of_the_lens_is_the_models_own_prediction() {
    let (_d, m) = tiny_f32();
    let mut s = Session::new(&m, (3..13).collect(), 4, SamplerConfig::default());
    let plain = s.step().unwrap();
    assert!(plain.logit_lens.is_empty(), "off unless asked for");
    s.probe.lens = true;
    for _ in 0..2 {
        let info = s.step().unwrap();
        assert_eq!(info.logit_lens.len(), N_LAYER);
        let last = info.logit_lens.last().unwrap();
        // Greedy sampling takes the top token, which the last layer's lens row names.
        assert_eq!(last.id, info.top_k[0].id);
        assert!((last.prob - info.top_k[0].prob).abs() < 1e-4, "{last:?}");
        assert!((last.chosen_prob - last.prob).abs() < 1e-6);
        for (l, r) in info.logit_lens.iter().enumerate() {
            assert_eq!(r.layer, l);
            assert!((0.0..=1.0).contains(&r.prob) && r.chosen_prob <= r.prob + 1e-6);
        }
    }
}

#[test]
fn the_answer_forms_where_it_stays_on_top() {
    let row = |layer, id| LensRow {
        layer,
        id,
        token: String::new(),
        prob: 0.5,
        chosen_prob: 0.1,
    };
    let rows: Vec<LensRow> = [5, 7, 7, 3, 7, 7]
        .iter()
        .enumerate()
        .map(|(l, &id)| row(l, id))
        .collect();
    assert_eq!(forms_at(&rows, 7), Some(4));
    assert_eq!(forms_at(&rows, 3), None, "not on top at the last layer");
    assert_eq!(forms_at(&rows[4..], 7), Some(4), "on top throughout");
}

#[test]
fn trace_json_carries_one_lens_row_per_layer() {
    let out = Command::new(bin())
        .args([
            "trace",
            "--chat",
            "--prompt",
            "What is the capital of France?",
        ])
        .args(["--max-tokens", "3", "--json", "--model"])
        .arg(real_model())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let lens = v["logit_lens"].as_array().unwrap();
        assert_eq!(lens.len(), 30);
        for key in ["layer", "id", "token", "prob"] {
            assert!(lens[0].get(key).is_some(), "{key} missing: {}", lens[0]);
        }
        // Greedy decoding: the token written is the last layer's top guess.
        assert_eq!(lens[29]["token"], v["token"], "{line}");
    }
}

#[test]
fn the_lens_pane_and_picture_show_each_layers_guess() {
    use inferlab::ui::app::{Action, Pane};
    let mut a = fixture::app();
    let mut r = a.report().unwrap().clone();
    r.iteration += 1;
    r.info.token_id = 4;
    r.info.token = " stores".into();
    r.info.logit_lens = vec![
        LensRow {
            layer: 0,
            id: 6,
            token: " keeps".into(),
            prob: 0.4,
            chosen_prob: 0.1,
        },
        LensRow {
            layer: 1,
            id: 4,
            token: " stores".into(),
            prob: 0.62,
            chosen_prob: 0.62,
        },
    ];
    a.on_event(inferlab::worker::Event::Report(Box::new(r)));
    a.update(Action::ToggleLens);
    assert!(a.screen.shows(Pane::Lens) && a.screen.focus == Pane::Lens);
    let mut term = ratatui::Terminal::new(ratatui::backend::TestBackend::new(200, 60)).unwrap();
    let theme = inferlab::ui::theme::Theme {
        mode: inferlab::ui::theme::ColorMode::None,
    };
    term.draw(|f| inferlab::ui::draw::draw(&a, &theme, f.area(), f.buffer_mut()))
        .unwrap();
    let text = format!("{}", term.backend());
    assert!(
        text.contains("logit lens · what each layer would predict"),
        "{text}"
    );
    assert!(
        text.contains(r#"sampled " stores" · top guess from layer 1 on"#),
        "{text}"
    );
    assert!(
        text.contains("·keeps") && !text.contains("attention · layer"),
        "{text}"
    );
    let svg = inferlab::export::render_svg(&a.scene(), inferlab::export::ExportPane::Lens).unwrap();
    assert!(svg.contains("layer 0") && svg.contains("layer 1"), "{svg}");
    assert!(svg.contains("top guess from layer 1 on"));
    // o again gives the heatmap back, and the engine stops the lens: what the screen
    // watches goes out with the settings (the event loop sends it every frame it changes).
    a.update(Action::ToggleLens);
    assert!(!a.screen.shows(Pane::Lens) && a.screen.focus == Pane::Attention);
    a.watch_command();
    assert!(!a.settings.watch.lens);
}
