//! `State`: what changes during a run.

/// Positions and velocities, plus the previous step that BDF2 needs.
#[derive(Clone, Debug, PartialEq)]
pub struct State {
    /// Positions (m), one per vertex.
    pub positions: Vec<[f64; 3]>,
    /// Velocities (m/s), one per vertex.
    pub velocities: Vec<[f64; 3]>,
    /// The state one step earlier, once a step has been taken since the last reset.
    #[allow(clippy::type_complexity)]
    pub previous: Option<(Vec<[f64; 3]>, Vec<[f64; 3]>)>,
}

impl State {
    /// A state at rest at `positions`.
    pub fn at_rest(positions: Vec<[f64; 3]>) -> State {
        let velocities = vec![[0.0; 3]; positions.len()];
        State { positions, velocities, previous: None }
    }
}
