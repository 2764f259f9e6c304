//! The key table: one list drives key handling, the footer and the help screen, so
//! they can never disagree.

use super::app::Action;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// One binding.
pub struct Binding {
    pub keys: &'static str,
    pub help: &'static str,
    /// Shown in the footer.
    pub footer: bool,
    pub action: Action,
    codes: &'static [KeyCode],
}

/// Every key the app answers to.
pub const BINDINGS: &[Binding] = &[
    Binding {
        keys: "space",
        help: "run one iteration (prefill, then one decode step)",
        footer: true,
        action: Action::Step,
        codes: &[KeyCode::Char(' ')],
    },
    Binding {
        keys: "r + −",
        help: "run / pause; + − run faster / slower",
        footer: true,
        action: Action::ToggleRun,
        codes: &[KeyCode::Char('r')],
    },
    Binding {
        keys: "",
        help: "",
        footer: false,
        action: Action::Faster,
        codes: &[KeyCode::Char('+'), KeyCode::Char('=')],
    },
    Binding {
        keys: "",
        help: "",
        footer: false,
        action: Action::Slower,
        codes: &[KeyCode::Char('-'), KeyCode::Char('_')],
    },
    Binding {
        keys: "m",
        help: "head layout: MHA → GQA → MQA (recomputes the sequence)",
        footer: true,
        action: Action::CycleLayout,
        codes: &[KeyCode::Char('m')],
    },
    Binding {
        keys: "f",
        help: "attention kernel: naive ↔ tiled (FlashAttention)",
        footer: true,
        action: Action::ToggleKernel,
        codes: &[KeyCode::Char('f')],
    },
    Binding {
        keys: "c",
        help: "serving KV cache: paged ↔ contiguous (restarts the workload)",
        footer: true,
        action: Action::ToggleCache,
        codes: &[KeyCode::Char('c')],
    },
    Binding {
        keys: "b",
        help: "batching: continuous ↔ static (restarts the workload)",
        footer: true,
        action: Action::TogglePolicy,
        codes: &[KeyCode::Char('b')],
    },
    Binding {
        keys: "s",
        help: "side by side: same workload, other cache → other policy → off",
        footer: true,
        action: Action::CycleCompare,
        codes: &[KeyCode::Char('s')],
    },
    Binding {
        keys: "a",
        help: "new request: type a prompt, Enter to send, Esc to cancel",
        footer: true,
        action: Action::StartInput,
        codes: &[KeyCode::Char('a')],
    },
    Binding {
        keys: "j k",
        help: "next / previous layer (or mouse wheel on the heatmap)",
        footer: true,
        action: Action::LayerDown,
        codes: &[KeyCode::Char('j'), KeyCode::Down],
    },
    Binding {
        keys: "",
        help: "",
        footer: false,
        action: Action::LayerUp,
        codes: &[KeyCode::Char('k'), KeyCode::Up],
    },
    Binding {
        keys: "h l",
        help: "previous / next head (or click a head in the heads pane)",
        footer: true,
        action: Action::HeadLeft,
        codes: &[KeyCode::Char('h'), KeyCode::Left],
    },
    Binding {
        keys: "",
        help: "",
        footer: false,
        action: Action::HeadRight,
        codes: &[KeyCode::Char('l'), KeyCode::Right],
    },
    Binding {
        keys: "v",
        help: "heatmap values: softmax weights ↔ raw Q·Kᵀ/√d scores",
        footer: false,
        action: Action::ToggleValues,
        codes: &[KeyCode::Char('v')],
    },
    Binding {
        keys: ", .",
        help: "scroll the heatmap back / forward through a long context",
        footer: false,
        action: Action::ScrollBack,
        codes: &[KeyCode::Char(','), KeyCode::PageUp],
    },
    Binding {
        keys: "",
        help: "",
        footer: false,
        action: Action::ScrollForward,
        codes: &[KeyCode::Char('.'), KeyCode::PageDown],
    },
    Binding {
        keys: "w",
        help: "what does this token look at: its top keys, prompt vs generated",
        footer: true,
        action: Action::ToggleLooksAt,
        codes: &[KeyCode::Char('w')],
    },
    Binding {
        keys: "x",
        help: "attention sink: full cache vs window vs window + page 0",
        footer: false,
        action: Action::ToggleSink,
        codes: &[KeyCode::Char('x')],
    },
    Binding {
        keys: "e",
        help: "export focused pane: SVG + PNG (attention, heads, KV, serving)",
        footer: false,
        action: Action::Export,
        codes: &[KeyCode::Char('e')],
    },
    Binding {
        keys: "tab",
        help: "move focus between panes",
        footer: false,
        action: Action::FocusNext,
        codes: &[KeyCode::Tab],
    },
    Binding {
        keys: "[ ]",
        help: "history: one iteration back / forward (space resumes live)",
        footer: false,
        action: Action::ScrubBack,
        codes: &[KeyCode::Char('[')],
    },
    Binding {
        keys: "",
        help: "",
        footer: false,
        action: Action::ScrubForward,
        codes: &[KeyCode::Char(']')],
    },
    Binding {
        keys: "n p",
        help: "lesson: next / previous step",
        footer: true,
        action: Action::NextStep,
        codes: &[KeyCode::Char('n')],
    },
    Binding {
        keys: "",
        help: "",
        footer: false,
        action: Action::PrevStep,
        codes: &[KeyCode::Char('p')],
    },
    Binding {
        keys: "1-9",
        help: "lesson: answer the open question",
        footer: false,
        action: Action::Answer(1),
        codes: &[],
    },
    Binding {
        keys: "L",
        help: "lesson list (j k to choose, Enter to open, Esc to close)",
        footer: false,
        action: Action::ToggleLessons,
        codes: &[KeyCode::Char('L')],
    },
    Binding {
        keys: "",
        help: "",
        footer: false,
        action: Action::Confirm,
        codes: &[KeyCode::Enter],
    },
    Binding {
        keys: "?",
        help: "this help",
        footer: true,
        action: Action::ToggleHelp,
        codes: &[KeyCode::Char('?')],
    },
    Binding {
        keys: "q",
        help: "quit",
        footer: true,
        action: Action::Quit,
        codes: &[KeyCode::Char('q'), KeyCode::Esc],
    },
];

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
