//! Colours: a perceptual ramp for heatmaps, request colours, and the fallbacks for
//! 256-colour terminals and `NO_COLOR`.

use ratatui::style::{Color, Modifier, Style};

/// How much colour the terminal gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorMode {
    TrueColor,
    Ansi256,
    /// `NO_COLOR` is set: shapes and shades only.
    None,
}

impl ColorMode {
    /// From the environment: `NO_COLOR` wins, then `COLORTERM`.
    pub fn detect() -> Self {
        if std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()) {
            return Self::None;
        }
        match std::env::var("COLORTERM").as_deref() {
            Ok("truecolor") | Ok("24bit") => Self::TrueColor,
            _ => Self::Ansi256,
        }
    }
}

/// Theme: the colour mode and the styles built from it.
#[derive(Debug, Clone, Copy)]
pub struct Theme {
    pub mode: ColorMode,
}

pub use crate::views::palette::{ramp_rgb, request_rgb};

/// Shades for `NO_COLOR`, darkest first.
pub const SHADES: [char; 5] = [' ', '░', '▒', '▓', '█'];

impl Theme {
    /// The theme for this terminal.
    pub fn detect() -> Self {
        Self {
            mode: ColorMode::detect(),
        }
    }

    /// An RGB colour as this terminal can show it.
    pub fn rgb(&self, r: u8, g: u8, b: u8) -> Color {
        match self.mode {
            ColorMode::TrueColor => Color::Rgb(r, g, b),
            ColorMode::Ansi256 => {
                let q = |c: u8| ((c as u16 * 5 + 127) / 255) as u8;
                Color::Indexed(16 + 36 * q(r) + 6 * q(g) + q(b))
            }
            ColorMode::None => Color::Reset,
        }
    }

    /// The ramp colour for `x` in [0, 1].
    pub fn ramp(&self, x: f32) -> Color {
        let (r, g, b) = ramp_rgb(x);
        self.rgb(r, g, b)
    }

    /// The shade character for `x` in [0, 1] (used when there is no colour).
    pub fn shade(x: f32) -> char {
        let i = (x.clamp(0.0, 1.0) * (SHADES.len() - 1) as f32).round() as usize;
        SHADES[i]
    }

    /// A distinct colour per request id.
    pub fn request(&self, id: usize) -> Color {
        let (r, g, b) = request_rgb(id);
        self.rgb(r, g, b)
    }

    /// Title style of the focused pane.
    pub fn focused(&self) -> Style {
        match self.mode {
            ColorMode::None => Style::default().add_modifier(Modifier::BOLD | Modifier::REVERSED),
            _ => Style::default()
                .fg(Color::Yellow)
                .add_modifier(Modifier::BOLD),
        }
    }

    /// Dim text.
    pub fn dim(&self) -> Style {
        match self.mode {
            ColorMode::None => Style::default(),
            _ => Style::default().fg(Color::DarkGray),
        }
    }

    /// A second emphasis, for what contrasts with the accent (the KV cache beside the
    /// weights).
    pub fn warm(&self) -> Style {
        match self.mode {
            ColorMode::None => Style::default(),
            _ => Style::default().fg(Color::LightRed),
        }
    }

    /// Emphasis.
    pub fn accent(&self) -> Style {
        match self.mode {
            ColorMode::None => Style::default().add_modifier(Modifier::BOLD),
            _ => Style::default()
                .fg(Color::Cyan)
                .add_modifier(Modifier::BOLD),
        }
    }
}
