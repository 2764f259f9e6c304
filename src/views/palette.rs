//! The colours every picture shares, as RGB: the terminal maps them to its colour mode,
//! the exports write them as they are.

/// Viridis control points (perceptually uniform, readable in greyscale and by most
/// colour-blind viewers).
const VIRIDIS: [(u8, u8, u8); 9] = [
    (68, 1, 84),
    (71, 44, 122),
    (59, 81, 139),
    (44, 113, 142),
    (33, 144, 141),
    (39, 173, 129),
    (92, 200, 99),
    (170, 220, 50),
    (253, 231, 37),
];

/// The viridis colour for `x` in [0, 1], as RGB (the terminal and the exported pictures
/// share it).
pub fn ramp_rgb(x: f32) -> (u8, u8, u8) {
    let x = x.clamp(0.0, 1.0) * (VIRIDIS.len() - 1) as f32;
    let i = (x.floor() as usize).min(VIRIDIS.len() - 2);
    let f = x - i as f32;
    let (a, b) = (VIRIDIS[i], VIRIDIS[i + 1]);
    let mix = |p: u8, q: u8| (p as f32 + (q as f32 - p as f32) * f).round() as u8;
    (mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// Okabe–Ito colours, one per request id (or KV head), distinct for colour-blind viewers.
pub fn request_rgb(id: usize) -> (u8, u8, u8) {
    const P: [(u8, u8, u8); 8] = [
        (86, 180, 233),
        (230, 159, 0),
        (0, 158, 115),
        (240, 228, 66),
        (204, 121, 167),
        (213, 94, 0),
        (0, 114, 178),
        (170, 170, 170),
    ];
    P[id % P.len()]
}
