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
    /// The keys and what each does (`j` down and `k` up share one row).
    pub on: &'static [(KeyCode, Action)],
}

impl Binding {
    /// The row's main action (its first key's).
    pub fn action(&self) -> Action {
        self.on[0].1
    }
}

/// Every key the app answers to.
pub const BINDINGS: &[Binding] = &[
    Binding {
        keys: "space",
        help: "run one iteration (prefill, then one decode step)",
        rank: 1,
        hint: "step",
        on: &[(KeyCode::Char(' '), Action::Step)],
    },
    Binding {
        keys: "r + −",
        help: "run / pause; + − run faster / slower",
        rank: 2,
        hint: "run/pause",
        on: &[
            (KeyCode::Char('r'), Action::ToggleRun),
            (KeyCode::Char('+'), Action::Faster),
            (KeyCode::Char('='), Action::Faster),
            (KeyCode::Char('-'), Action::Slower),
            (KeyCode::Char('_'), Action::Slower),
        ],
    },
    Binding {
        keys: "m",
        help: "head layout: MHA → GQA → MQA (recomputes the sequence)",
        rank: 3,
        hint: "MHA/GQA/MQA",
        on: &[(KeyCode::Char('m'), Action::CycleLayout)],
    },
    Binding {
        keys: "f i W",
        help: "f kernel naive↔tiled · i KV f32→f16→int8 · W weights q8_0→q4→f32",
        rank: 5,
        hint: "kernel/KV/weights",
        on: &[
            (KeyCode::Char('f'), Action::ToggleKernel),
            (KeyCode::Char('i'), Action::CycleKvElem),
            (KeyCode::Char('W'), Action::CycleWeights),
        ],
    },
    Binding {
        keys: "c b d u",
        help: "c paged↔contiguous · b continuous↔static · d chunks · u table",
        rank: 6,
        hint: "cache/batching",
        on: &[
            (KeyCode::Char('c'), Action::ToggleCache),
            (KeyCode::Char('b'), Action::TogglePolicy),
            (KeyCode::Char('d'), Action::ToggleChunked),
            (KeyCode::Char('u'), Action::NextRequest),
        ],
    },
    Binding {
        keys: "s",
        help: "side by side: cache → policy → one at a time → layout → off",
        rank: 8,
        hint: "side by side",
        on: &[(KeyCode::Char('s'), Action::CycleCompare)],
    },
    Binding {
        keys: "a",
        help: "new request: type a prompt, Enter to send, Esc to cancel",
        rank: 4,
        hint: "new prompt",
        on: &[(KeyCode::Char('a'), Action::StartInput)],
    },
    Binding {
        keys: "j k h l",
        help: "next / previous layer, head left / right (wheel; click a head)",
        rank: 3,
        hint: "layer/head",
        on: &[
            (KeyCode::Char('j'), Action::LayerDown),
            (KeyCode::Down, Action::LayerDown),
            (KeyCode::Char('k'), Action::LayerUp),
            (KeyCode::Up, Action::LayerUp),
            (KeyCode::Char('h'), Action::HeadLeft),
            (KeyCode::Left, Action::HeadLeft),
            (KeyCode::Char('l'), Action::HeadRight),
            (KeyCode::Right, Action::HeadRight),
        ],
    },
    Binding {
        keys: "T P C",
        help: "T temperature 0→0.7→1→1.5 · P top-p · C KV cache on ↔ off",
        rank: 9,
        hint: "",
        on: &[
            (KeyCode::Char('T'), Action::CycleTemperature),
            (KeyCode::Char('P'), Action::CycleTopP),
            (KeyCode::Char('C'), Action::ToggleKvCache),
        ],
    },
    Binding {
        keys: "M",
        help: "beside: the same tokens under another head layout (MHA/GQA/MQA)",
        rank: 9,
        hint: "",
        on: &[(KeyCode::Char('M'), Action::CycleBeside)],
    },
    Binding {
        keys: "v , .",
        help: "heatmap: v weights ↔ raw Q·Kᵀ/√d scores; , . scroll back / forward",
        rank: 12,
        hint: "scores/scroll",
        on: &[
            (KeyCode::Char('v'), Action::ToggleValues),
            (KeyCode::Char(','), Action::ScrollBack),
            (KeyCode::PageUp, Action::ScrollBack),
            (KeyCode::Char('.'), Action::ScrollForward),
            (KeyCode::PageDown, Action::ScrollForward),
        ],
    },
    Binding {
        keys: "w o",
        help: "what this token looks at; o: logit lens (each layer's guess)",
        rank: 9,
        hint: "looks at/lens",
        on: &[
            (KeyCode::Char('w'), Action::ToggleLooksAt),
            (KeyCode::Char('o'), Action::ToggleLens),
        ],
    },
    Binding {
        keys: "x",
        help: "attention sink: full cache vs window vs window + page 0",
        rank: 12,
        hint: "sink",
        on: &[(KeyCode::Char('x'), Action::ToggleSink)],
    },
    Binding {
        keys: "t g",
        help: "traffic pane (bytes, roofline) · g: chat ↔ long-story serving",
        rank: 9,
        hint: "traffic/long ctx",
        on: &[
            (KeyCode::Char('t'), Action::ToggleTraffic),
            (KeyCode::Char('g'), Action::ToggleWorkload),
        ],
    },
    Binding {
        keys: "z tab e",
        help: "zoom (lesson: pane → whole screen → back) · tab/⇧tab pane · e export",
        rank: 8,
        hint: "zoom/focus/export",
        on: &[
            (KeyCode::Char('z'), Action::ToggleZoom),
            (KeyCode::Tab, Action::FocusNext),
            (KeyCode::BackTab, Action::FocusPrev),
            (KeyCode::Char('e'), Action::Export),
        ],
    },
    Binding {
        keys: "[ ]",
        help: "history: one iteration back / forward (space resumes live)",
        rank: 11,
        hint: "history",
        on: &[
            (KeyCode::Char('['), Action::ScrubBack),
            (KeyCode::Char(']'), Action::ScrubForward),
        ],
    },
    Binding {
        keys: "n p",
        help: "lesson: next / previous step",
        rank: 0,
        hint: "lesson step",
        on: &[
            (KeyCode::Char('n'), Action::NextStep),
            (KeyCode::Char('p'), Action::PrevStep),
        ],
    },
    Binding {
        keys: "J K",
        help: "lesson: scroll its text down / up (or the mouse wheel over it)",
        rank: 0,
        hint: "scroll text",
        on: &[
            (KeyCode::Char('J'), Action::ScrollLesson(3)),
            (KeyCode::Char('K'), Action::ScrollLesson(-3)),
        ],
    },
    Binding {
        keys: "1-9",
        help: "lesson: answer the open question",
        rank: 0,
        hint: "answer",
        on: &[
            (KeyCode::Char('1'), Action::Answer(1)),
            (KeyCode::Char('2'), Action::Answer(2)),
            (KeyCode::Char('3'), Action::Answer(3)),
            (KeyCode::Char('4'), Action::Answer(4)),
            (KeyCode::Char('5'), Action::Answer(5)),
            (KeyCode::Char('6'), Action::Answer(6)),
            (KeyCode::Char('7'), Action::Answer(7)),
            (KeyCode::Char('8'), Action::Answer(8)),
            (KeyCode::Char('9'), Action::Answer(9)),
        ],
    },
    Binding {
        keys: "L G",
        help: "lesson list (j k, Enter opens, Esc closes) · G glossary of terms",
        rank: 13,
        hint: "lessons",
        on: &[
            (KeyCode::Char('L'), Action::ToggleLessons),
            (KeyCode::Enter, Action::Confirm),
            (KeyCode::Char('G'), Action::ToggleGlossary),
        ],
    },
    Binding {
        keys: "?",
        help: "this help (Esc closes it, the glossary, lesson list or prompt)",
        rank: 0,
        hint: "help",
        // Esc only ever closes something: a learner closing an overlay twice must not
        // lose the app. q and Ctrl-C quit.
        on: &[
            (KeyCode::Char('?'), Action::ToggleHelp),
            (KeyCode::Esc, Action::Cancel),
        ],
    },
    Binding {
        keys: "q",
        help: "quit",
        rank: 0,
        hint: "quit",
        on: &[(KeyCode::Char('q'), Action::Quit)],
    },
];

/// Whether a binding only means something while a lesson is open.
pub fn is_lesson_key(b: &Binding) -> bool {
    matches!(
        b.action(),
        Action::NextStep | Action::Answer(_) | Action::ToggleLessons | Action::ScrollLesson(_)
    )
}

/// The footer's entries for a line of `width` columns: `?` and `q` always, the open
/// lesson's keys next, then as many others as fit, most useful first.
pub fn footer_entries(width: usize, lesson_open: bool) -> Vec<(&'static str, &'static str)> {
    let cost = |b: &Binding| b.keys.chars().count() + b.hint.chars().count() + 3;
    let fixed: Vec<&Binding> = BINDINGS
        .iter()
        .filter(|b| matches!(b.action(), Action::ToggleHelp | Action::Quit))
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

/// The action for a key press, if any; `typing`: a new prompt is being typed, where keys
/// are text (Enter sends it, Esc cancels).
pub fn action_for(key: KeyEvent, typing: bool) -> Option<Action> {
    if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
        return Some(Action::Quit);
    }
    if typing {
        return match key.code {
            KeyCode::Enter => Some(Action::Submit),
            KeyCode::Esc => Some(Action::Cancel),
            KeyCode::Backspace => Some(Action::Backspace),
            KeyCode::Char(c) => Some(Action::Type(c)),
            _ => None,
        };
    }
    BINDINGS
        .iter()
        .flat_map(|b| b.on)
        .find(|(code, _)| *code == key.code)
        .map(|&(_, a)| a)
}
