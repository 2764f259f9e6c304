//! The lesson file parser. It never panics: every problem becomes a `file:line` error,
//! and it keeps going so one run reports them all.

use super::format::*;

/// One problem in a lesson file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct LessonError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

/// Keys a step line may start with (`key: value`).
pub const KEYS: [&str; 6] = ["set", "prompt", "task", "check", "notice", "shows"];

/// Parses one lesson file. `file` names it in errors.
pub fn parse(file: &str, text: &str) -> Result<Lesson, Vec<LessonError>> {
    let mut p = Parser {
        file,
        errors: Vec::new(),
        task_line: 0,
        check_seen: false,
    };
    let lesson = p.lesson(text);
    if p.errors.is_empty() {
        Ok(lesson)
    } else {
        Err(p.errors)
    }
}

struct Parser<'a> {
    file: &'a str,
    errors: Vec<LessonError>,
    /// The line of the current step's `task:`.
    task_line: usize,
    /// Whether the current task has a `check:` line at all, valid or not: an invalid one
    /// is reported as invalid, not as missing.
    check_seen: bool,
}

/// What the parser holds while it reads a lesson: the lesson so far, and the step and
/// question still open.
struct Reading {
    lesson: Lesson,
    step: Option<Step>,
    question: Option<OpenQuestion>,
}

/// A `? question` being read, until its choices end.
struct OpenQuestion {
    line: usize,
    text: String,
    kind: QuestionKind,
}

impl Parser<'_> {
    fn err(&mut self, line: usize, message: impl Into<String>) {
        self.errors.push(LessonError {
            file: self.file.to_string(),
            line,
            message: message.into(),
        });
    }

    fn lesson(&mut self, text: &str) -> Lesson {
        let mut r = Reading {
            lesson: Lesson {
                file: self.file.to_string(),
                title: String::new(),
                intro: String::new(),
                steps: Vec::new(),
            },
            step: None,
            question: None,
        };
        for (i, raw) in text.lines().enumerate() {
            self.line(i + 1, raw.trim_end(), &mut r);
        }
        self.finish(r)
    }

    /// One line of the file, `n` counting from 1.
    fn line(&mut self, n: usize, line: &str, r: &mut Reading) {
        self.figures(n, line);
        // Choices belong to the question just above them.
        if let Some(q) = r.question.as_mut() {
            if let Some(rest) = line.strip_prefix("- ").or_else(|| line.strip_prefix("* ")) {
                self.choice(n, q, rest, line.starts_with('*'));
                return;
            }
            let q = r.question.take().expect("checked above");
            self.close_question(q, r.step.as_mut());
        }
        if let Some(title) = line.strip_prefix("## ") {
            return self.step_heading(n, title, r);
        }
        if let Some(title) = line.strip_prefix("# ") {
            return self.title(n, title, r);
        }
        if r.lesson.title.is_empty() {
            if !line.trim().is_empty() {
                self.err(n, "the file must start with a `# Title` line");
                // Say it once, then read the rest as if the title were there.
                r.lesson.title = "(untitled)".into();
            }
            return;
        }
        if let Some(rest) = line.strip_prefix("?predict") {
            if self.in_step(n, r) {
                r.question = self.predict(n, rest);
            }
            return;
        }
        if let Some(text) = line.strip_prefix("? ") {
            return self.open_question(n, text, r);
        }
        if let Some((key, value)) = key_line(line) {
            match r.step.as_mut() {
                Some(s) => self.step_key(n, key, value.trim(), s),
                None => self.err(
                    n,
                    format!("`{key}:` belongs to a step (`## ` heading first)"),
                ),
            }
            return;
        }
        // Prose.
        let target = match r.step.as_mut() {
            Some(s) => &mut s.prose,
            None => &mut r.lesson.intro,
        };
        target.push_str(line);
        target.push('\n');
    }

    /// A `## ` line: the step before it ends, a new one begins.
    fn step_heading(&mut self, n: usize, title: &str, r: &mut Reading) {
        if let Some(s) = r.step.take() {
            self.close_step(s, &mut r.lesson);
        }
        if r.lesson.title.is_empty() {
            self.err(n, "the file must start with a `# Title` line");
        }
        if title.trim().is_empty() {
            self.err(n, "a step needs a title after `## `");
        }
        r.step = Some(Step {
            title: title.trim().to_string(),
            line: n,
            ..Step::default()
        });
    }

    /// A `# ` line: the lesson's title, once, before any step.
    fn title(&mut self, n: usize, title: &str, r: &mut Reading) {
        if !r.lesson.title.is_empty() || r.step.is_some() {
            self.err(n, "only one `# Title` per lesson, at the top");
        } else if title.trim().is_empty() {
            self.err(n, "the title is empty");
        } else {
            r.lesson.title = title.trim().to_string();
        }
    }

    /// Whether a question at line `n` has a step to belong to; says so when not.
    fn in_step(&mut self, n: usize, r: &Reading) -> bool {
        if r.step.is_none() {
            self.err(n, "questions belong to a step (`## ` heading first)");
        }
        r.step.is_some()
    }

    /// A `? ` line: a choice question opens; its choices follow.
    fn open_question(&mut self, n: usize, text: &str, r: &mut Reading) {
        if !self.in_step(n, r) {
            return;
        }
        if text.trim().is_empty() {
            self.err(n, "the question is empty");
        }
        r.question = Some(OpenQuestion {
            line: n,
            text: text.trim().to_string(),
            kind: QuestionKind::Choice(Vec::new()),
        });
    }

    /// The end of the file: what is still open closes, and the whole lesson is checked.
    fn finish(&mut self, mut r: Reading) -> Lesson {
        if let Some(q) = r.question.take() {
            self.close_question(q, r.step.as_mut());
        }
        if let Some(s) = r.step.take() {
            self.close_step(s, &mut r.lesson);
        }
        let mut lesson = r.lesson;
        if lesson.title.is_empty() {
            self.err(1, "the file must start with a `# Title` line");
        } else if lesson.steps.is_empty() {
            self.err(1, "a lesson needs at least one `## ` step");
        }
        self.answers_by_length(&lesson);
        lesson.intro = lesson.intro.trim().to_string();
        lesson
    }

    /// A lesson whose every right answer is its longest (or shortest) choice can be passed
    /// without reading it: refused, once there are two choice questions to go by.
    fn answers_by_length(&mut self, lesson: &Lesson) {
        let questions = || lesson.steps.iter().flat_map(|s| &s.questions);
        let choice_questions = questions()
            .filter(|q| matches!(q.kind, QuestionKind::Choice(_)))
            .count();
        let all = |f: fn(&Question) -> Option<bool>| {
            choice_questions >= 2 && questions().all(|q| f(q) != Some(false))
        };
        for (f, which) in [
            (
                super::quiz::right_is_longest as fn(&Question) -> Option<bool>,
                "longest",
            ),
            (super::quiz::right_is_shortest, "shortest"),
        ] {
            if all(f) {
                self.err(
                    1,
                    format!("in every question of this lesson the right answer is the {which} choice: a learner can answer by length"),
                );
            }
        }
    }

    /// A `- ` or `* ` line under a question: a choice, `* ` marking a right one.
    fn choice(&mut self, n: usize, q: &mut OpenQuestion, rest: &str, right: bool) {
        let QuestionKind::Choice(choices) = &mut q.kind else {
            self.err(
                n,
                "a `?predict` question takes its choices from the live app; remove this line",
            );
            return;
        };
        match rest.split_once("::") {
            Some((t, why)) if !t.trim().is_empty() && !why.trim().is_empty() => {
                if let Some(v) = verdict_prefix(why) {
                    self.err(
                        n,
                        format!("the app says `{v}` itself; start the explanation with the reason"),
                    );
                }
                choices.push(Choice {
                    text: t.trim().to_string(),
                    right,
                    why: why.trim().to_string(),
                })
            }
            _ => self.err(
                n,
                "a choice needs its text and, after `::`, why it is right or wrong",
            ),
        }
    }

    /// A `?predict kind: question` line.
    fn predict(&mut self, n: usize, rest: &str) -> Option<OpenQuestion> {
        let (kind, text) = rest.trim().split_once(':').unwrap_or((rest.trim(), ""));
        match Predict::ALL.iter().find(|(name, _)| *name == kind.trim()) {
            Some(&(_, p)) if !text.trim().is_empty() => Some(OpenQuestion {
                line: n,
                text: text.trim().to_string(),
                kind: QuestionKind::Predict(p),
            }),
            Some(_) => {
                self.err(n, "a prediction needs its question after `kind:`");
                None
            }
            None => {
                let known = names(&Predict::ALL);
                self.err(
                    n,
                    format!("unknown prediction `{}` (known: {known})", kind.trim()),
                );
                None
            }
        }
    }

    /// A `key: value` line of a step.
    fn step_key(&mut self, n: usize, key: &str, value: &str, s: &mut Step) {
        match key {
            "set" => self.settings(n, value, &mut s.set),
            "prompt" if value.is_empty() => self.err(n, "the prompt is empty"),
            "prompt" if value.chars().count() > MOST_PROMPT_CHARS => self.err(
                n,
                format!("the prompt is over {MOST_PROMPT_CHARS} characters: the live request needs room in the context for its answer"),
            ),
            "prompt" => s.prompt = Some(value.to_string()),
            "notice" => s.notice = Some(value.to_string()),
            "shows" => {
                for piece in value.split(';').map(str::trim) {
                    if piece.is_empty() {
                        self.err(n, "`shows:` lists screen text, separated by `;`");
                    } else {
                        s.shows.push(piece.to_string());
                    }
                }
            }
            "task" => {
                if s.task.is_some() {
                    self.err(n, "one `task:` per step");
                }
                self.task_line = n;
                self.check_seen = false;
                s.task = Some(Task {
                    text: value.to_string(),
                    check: Vec::new(),
                });
            }
            "check" => {
                let conds = self.check(n, value);
                match s.task.as_mut() {
                    Some(_) if self.check_seen => self.err(n, "one `check:` per task"),
                    Some(t) => t.check = conds,
                    None => self.err(n, "`check:` needs a `task:` line above it"),
                }
                self.check_seen = true;
            }
            _ => self.err(
                n,
                format!("unknown key `{key}:` (known: {})", KEYS.join(", ")),
            ),
        }
    }

    /// Every `{name}` on a line must be a live figure the app knows.
    fn figures(&mut self, n: usize, line: &str) {
        for name in figure_names(line) {
            if !FIGURES.iter().any(|(f, _)| *f == name) {
                let known = names(&FIGURES);
                self.err(
                    n,
                    format!("unknown live figure `{{{name}}}` (known: {known})"),
                );
            }
        }
    }

    fn close_question(&mut self, q: OpenQuestion, step: Option<&mut Step>) {
        if let QuestionKind::Choice(c) = &q.kind {
            if c.len() < 3 {
                self.err(
                    q.line,
                    "a question needs at least three choices (`- ` or `* ` lines)",
                );
            } else if !c.iter().any(|c| c.right) {
                self.err(q.line, "no right answer: mark it with `* ` instead of `- `");
            } else if c.len() > 9 {
                self.err(q.line, "at most nine choices (answered with keys 1-9)");
            }
        }
        let mut kind = q.kind;
        if let QuestionKind::Choice(c) = &mut kind {
            shuffle_choices(&q.text, c);
        }
        if let Some(s) = step {
            s.questions.push(Question {
                line: q.line,
                text: q.text,
                kind,
            });
        }
    }

    fn close_step(&mut self, mut s: Step, lesson: &mut Lesson) {
        if s.task.is_some() && !self.check_seen {
            self.err(
                self.task_line.max(s.line),
                "a task needs a `check:` line so the app can tell when it is done",
            );
        }
        s.prose = s.prose.trim().to_string();
        lesson.steps.push(s);
    }

    fn settings(&mut self, n: usize, value: &str, set: &mut StepSettings) {
        for pair in value.split_whitespace() {
            let Some((k, v)) = pair.split_once('=') else {
                self.err(n, format!("`{pair}` should be key=value"));
                continue;
            };
            if let Err(e) = setting(set, k, v) {
                self.err(n, e.0);
            }
        }
    }

    fn check(&mut self, n: usize, value: &str) -> Vec<Cond> {
        let mut out = Vec::new();
        for part in value.split(" and ") {
            match cond(part) {
                Ok(c) => out.push(c),
                Err(e) => self.err(n, e.0),
            }
        }
        out
    }
}

message_error!(
    /// What is wrong with one entry of a `set:` or `check:` line; the parser names the file
    /// and line.
    BadEntry
);

impl From<super::keys::BadValue> for BadEntry {
    fn from(why: super::keys::BadValue) -> Self {
        BadEntry(why.to_string())
    }
}

/// Sets `key` to `value` in `set`, or says what is wrong.
fn setting(set: &mut StepSettings, key: &str, value: &str) -> Result<(), BadEntry> {
    let Some(k) = super::keys::key(key) else {
        let known: Vec<&str> = super::keys::KEYS.iter().map(|k| k.name).collect();
        return Err(BadEntry(format!(
            "unknown setting `{key}` (known: {})",
            known.join(", ")
        )));
    };
    set.put(k, super::keys::KEYS[k].parse(value)?);
    Ok(())
}

/// The largest number a check may compare with: far more iterations than a step needs.
const MOST_COUNT: f64 = 100_000.0;

/// The longest `prompt:` a lesson may send, in characters: the live request must leave
/// the model's context room for its answer, and a lesson's prompt is a short request.
pub const MOST_PROMPT_CHARS: usize = 1000;

/// One condition of a `check:` line, `variable op value`.
fn cond(part: &str) -> Result<Cond, BadEntry> {
    let words: Vec<&str> = part.split_whitespace().collect();
    let [name, op, val] = words[..] else {
        return Err(BadEntry(format!(
            "`{}` should be `variable op value`",
            part.trim()
        )));
    };
    let Some(var) = Var::named(name) else {
        return Err(BadEntry(format!(
            "unknown check variable `{name}` (known: {})",
            names(&Var::all())
        )));
    };
    let op = match op {
        "==" => Op::Eq,
        "!=" => Op::Ne,
        ">=" => Op::Ge,
        "<=" => Op::Le,
        ">" => Op::Gt,
        "<" => Op::Lt,
        _ => {
            return Err(BadEntry(format!(
                "unknown operator `{op}` (known: == != >= <= > <)"
            )))
        }
    };
    let value = if var.numeric() {
        match val.parse::<f64>() {
            Ok(x) if (0.0..=MOST_COUNT).contains(&x) => CondValue::Num(x),
            // A check that can never hold would leave the step undone for good.
            Ok(x) if x.is_finite() => {
                return Err(BadEntry(format!(
                    "`{val}` is out of reach: the counts a check reads run from 0 to {MOST_COUNT}"
                )))
            }
            _ => return Err(BadEntry(format!("`{val}` is not a number"))),
        }
    } else {
        if !matches!(op, Op::Eq | Op::Ne) {
            return Err(BadEntry(format!(
                "`{}` compares with == or != only",
                part.trim()
            )));
        }
        let known = words_of(var);
        if !known.iter().any(|w| w == val) {
            return Err(BadEntry(format!(
                "`{val}` is not a value of `{name}` (known: {})",
                known.join(", ")
            )));
        }
        CondValue::Word(val.to_string())
    };
    Ok(Cond { var, op, value })
}

/// The words a check may compare a word-valued `var` with.
fn words_of(var: Var) -> Vec<String> {
    match var {
        Var::Key(k) => super::keys::KEYS[k].words(),
        _ => vec!["true".into(), "false".into()],
    }
}

/// `key: value` when the line starts with a lowercase identifier, a colon and a space.
fn key_line(line: &str) -> Option<(&str, &str)> {
    let (key, value) = line.split_once(':')?;
    // `https://…` at the start of a prose line is not a key.
    let ok = !key.is_empty()
        && key.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        && (value.is_empty() || value.starts_with(' '));
    ok.then_some((key, value))
}

fn names<T>(list: &[(&str, T)]) -> String {
    list.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

/// A verdict the explanation repeats (`Right:`, `Wrong:` …), which the lesson pane
/// already prints before it.
fn verdict_prefix(why: &str) -> Option<String> {
    let why = why.trim_start();
    ["right:", "wrong:", "not quite:", "correct:", "incorrect:"]
        .into_iter()
        .find_map(|v| why.get(..v.len()).filter(|p| p.eq_ignore_ascii_case(v)))
        .map(str::to_string)
}

/// Mixed into every question's shuffle. With only a few dozen questions, a fair shuffle
/// still often puts over a third of the right answers on one key; this value spreads the
/// shipped course's evenly (10, 10, 9 and 10 of 39 on keys 1–4; the files themselves
/// spread them 10, 10, 10, 9 for whoever reads them). `tests/lessons.rs` fails when a new
/// question, or a choice moved in a file, tips one key over 35%: then pick another.
const SHUFFLE_SALT: u64 = 15;

/// Puts a question's choices in an order drawn from its own text: the same every time
/// the lesson is read, different from question to question. Authors tend to write the
/// right answer in the same place (second, in this course's first draft); shown in file
/// order, a learner could answer by position.
pub fn shuffle_choices(question: &str, choices: &mut [Choice]) {
    // FNV-1a of the text seeds a splitmix64 stream: stable across builds and platforms.
    let basis = 0xcbf2_9ce4_8422_2325u64 ^ SHUFFLE_SALT;
    let mut state = question.bytes().fold(basis, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for i in (1..choices.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        choices.swap(i, j);
    }
}
