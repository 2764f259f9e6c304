//! The key table: one list drives key handling, the footer and the help screen, so
//! they can never disagree.

use super::app::Action;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// One binding.
pub struct Binding {
    pub keys: &'static str,
    pub help: &'static str,
    /// Footer order, most useful first (lesson keys and `?` `q` are placed by the footer).
    pub rank: u8,
    /// The footer's word for it; empty: help screen only.
    pub hint: &'static str,
    pub action: Action,
    codes: &'static [KeyCode],
}

/// Every key the app answers to.
pub const BINDINGS: &[Binding] = &[
    Binding {
        keys: "space",
        help: "run one iteration (prefill, then one decode step)",
        rank: 1,
        hint: "step",
        action: Action::Step,
        codes: &[KeyCode::Char(' ')],
    },
    Binding {
        keys: "r + −",
        help: "run / pause; + − run faster / slower",
        rank: 2,
        hint: "run/pause",
        action: Action::ToggleRun,
        codes: &[KeyCode::Char('r')],
    },
    Binding {
        keys: "",
        help: "",
        rank: 255,
        hint: "",
        action: Action::Faster,
        codes: &[KeyCode::Char('+'), KeyCode::Char('=')],
    },
    Binding {
        keys: "",
        help: "",
        rank: 255,
        hint: "",
        action: Action::Slower,
        codes: &[KeyCode::Char('-'), KeyCode::Char('_')],
    },
    Binding {
        keys: "m",
        help: "head layout: MHA → GQA → MQA (recomputes the sequence)",
        rank: 3,
        hint: "MHA/GQA/MQA",
        action: Action::CycleLayout,
        codes: &[KeyCode::Char('m')],
    },
    Binding {
        keys: "f",
        help: "attention kernel: naive ↔ tiled (FlashAttention)",
        rank: 5,
        hint: "naive/tiled",
        action: Action::ToggleKernel,
        codes: &[KeyCode::Char('f')],
    },
    Binding {
        keys: "c",
        help: "serving KV cache: paged ↔ contiguous (restarts the workload)",
        rank: 6,
        hint: "paged/contig",
        action: Action::ToggleCache,
        codes: &[KeyCode::Char('c')],
    },
    Binding {
        keys: "b",
        help: "batching: continuous ↔ static (restarts the workload)",
        rank: 7,
        hint: "batching",
        action: Action::TogglePolicy,
        codes: &[KeyCode::Char('b')],
    },
    Binding {
        keys: "s",
        help: "side by side: same workload, other cache → other policy → off",
        rank: 8,
        hint: "side by side",
        action: Action::CycleCompare,
        codes: &[KeyCode::Char('s')],
    },
    Binding {
        keys: "a",
        help: "new request: type a prompt, Enter to send, Esc to cancel",
        rank: 4,
        hint: "new prompt",
        action: Action::StartInput,
        codes: &[KeyCode::Char('a')],
    },
    Binding {
        keys: "j k",
        help: "next / previous layer (or mouse wheel on the heatmap)",
        rank: 3,
        hint: "layer",
        action: Action::LayerDown,
        codes: &[KeyCode::Char('j'), KeyCode::Down],
    },
    Binding {
        keys: "",
        help: "",
        rank: 255,
        hint: "",
        action: Action::LayerUp,
        codes: &[KeyCode::Char('k'), KeyCode::Up],
    },
    Binding {
        keys: "h l",
        help: "previous / next head (or click a head in the heads pane)",
        rank: 4,
        hint: "head",
        action: Action::HeadLeft,
        codes: &[KeyCode::Char('h'), KeyCode::Left],
    },
    Binding {
        keys: "",
        help: "",
        rank: 255,
        hint: "",
        action: Action::HeadRight,
        codes: &[KeyCode::Char('l'), KeyCode::Right],
    },
    Binding {
        keys: "v",
        help: "heatmap values: softmax weights ↔ raw Q·Kᵀ/√d scores",
        rank: 12,
        hint: "scores",
        action: Action::ToggleValues,
        codes: &[KeyCode::Char('v')],
    },
    Binding {
        keys: ", .",
        help: "scroll the heatmap back / forward through a long context",
        rank: 13,
        hint: "scroll",
        action: Action::ScrollBack,
        codes: &[KeyCode::Char(','), KeyCode::PageUp],
    },
    Binding {
        keys: "",
        help: "",
        rank: 255,
        hint: "",
        action: Action::ScrollForward,
        codes: &[KeyCode::Char('.'), KeyCode::PageDown],
    },
    Binding {
        keys: "w",
        help: "what does this token look at: its top keys, prompt vs generated",
        rank: 9,
        hint: "looks at",
        action: Action::ToggleLooksAt,
        codes: &[KeyCode::Char('w')],
    },
    Binding {
        keys: "x",
        help: "attention sink: full cache vs window vs window + page 0",
        rank: 12,
        hint: "sink",
        action: Action::ToggleSink,
        codes: &[KeyCode::Char('x')],
    },
    Binding {
        keys: "e",
        help: "export the focused pane as SVG + PNG",
        rank: 10,
        hint: "export",
        action: Action::Export,
        codes: &[KeyCode::Char('e')],
    },
    Binding {
        keys: "tab",
        help: "move focus between panes",
        rank: 11,
        hint: "focus",
        action: Action::FocusNext,
        codes: &[KeyCode::Tab],
    },
    Binding {
        keys: "[ ]",
        help: "history: one iteration back / forward (space resumes live)",
        rank: 11,
        hint: "history",
        action: Action::ScrubBack,
        codes: &[KeyCode::Char('[')],
    },
    Binding {
        keys: "",
        help: "",
        rank: 255,
        hint: "",
        action: Action::ScrubForward,
        codes: &[KeyCode::Char(']')],
    },
    Binding {
        keys: "n p",
        help: "lesson: next / previous step",
        rank: 0,
        hint: "lesson step",
        action: Action::NextStep,
        codes: &[KeyCode::Char('n')],
    },
    Binding {
        keys: "",
        help: "",
        rank: 255,
        hint: "",
        action: Action::PrevStep,
        codes: &[KeyCode::Char('p')],
    },
    Binding {
        keys: "1-9",
        help: "lesson: answer the open question",
        rank: 0,
        hint: "answer",
        action: Action::Answer(1),
        codes: &[],
    },
    Binding {
        keys: "L",
        help: "lesson list (j k to choose, Enter to open, Esc to close)",
        rank: 13,
        hint: "lessons",
        action: Action::ToggleLessons,
        codes: &[KeyCode::Char('L')],
    },
    Binding {
        keys: "",
        help: "",
        rank: 255,
        hint: "",
        action: Action::Confirm,
        codes: &[KeyCode::Enter],
    },
    Binding {
        keys: "?",
        help: "this help",
        rank: 0,
        hint: "help",
        action: Action::ToggleHelp,
        codes: &[KeyCode::Char('?')],
    },
    Binding {
        keys: "q",
        help: "quit",
        rank: 0,
        hint: "quit",
        action: Action::Quit,
        codes: &[KeyCode::Char('q'), KeyCode::Esc],
    },
];

/// Whether a binding only means something while a lesson is open.
pub fn is_lesson_key(b: &Binding) -> bool {
    matches!(
        b.action,
        Action::NextStep | Action::Answer(_) | Action::ToggleLessons
    )
}

/// The footer's entries for a line of `width` columns: `?` and `q` always, the open
/// lesson's keys next, then as many others as fit, most useful first.
pub fn footer_entries(width: usize, lesson_open: bool) -> Vec<(&'static str, &'static str)> {
    let cost = |b: &Binding| b.keys.chars().count() + b.hint.chars().count() + 3;
    let fixed: Vec<&Binding> = BINDINGS
        .iter()
        .filter(|b| matches!(b.action, Action::ToggleHelp | Action::Quit))
        .collect();
    let mut left = width.saturating_sub(fixed.iter().map(|b| cost(b)).sum());
    let mut rest: Vec<&Binding> = BINDINGS
        .iter()
        .filter(|b| !b.hint.is_empty() && !fixed.iter().any(|f| std::ptr::eq(*f, *b)))
        .filter(|b| lesson_open || !is_lesson_key(b))
        .collect();
    rest.sort_by_key(|b| if is_lesson_key(b) { 0 } else { b.rank });
    let mut out = Vec::new();
    for b in rest {
        if cost(b) <= left {
            left -= cost(b);
            out.push((b.keys, b.hint));
        }
    }
    out.extend(fixed.iter().map(|b| (b.keys, b.hint)));
    out
}

/// The action for a key press, if any.
pub fn action_for(key: KeyEvent) -> Option<Action> {
    if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
        return Some(Action::Quit);
    }
    if let KeyCode::Char(c @ '1'..='9') = key.code {
        return Some(Action::Answer(c as usize - '0' as usize));
    }
    BINDINGS
        .iter()
        .find(|b| b.codes.contains(&key.code))
        .map(|b| b.action)
}
