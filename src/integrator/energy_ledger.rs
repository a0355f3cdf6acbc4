//! The energy target both controlled integrators follow (stabilizing-integrators-realtime.md,
//! eq. 37; energy-controllable-a-search.md, Alg. 1):
//!
//! `target = H_initial + H_added - H_dissipated`, optionally decaying toward a ground level:
//! `T_{n+1} - ground = exp(-h / tau) (T_n - ground - dissipated_n)`.

use super::Decay;

/// The energy account of a simulation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EnergyLedger {
    target: f64,
    initial: f64,
    added: f64,
    dissipated: f64,
    decay: Option<Decay>,
}

impl EnergyLedger {
    /// A ledger whose target starts at `initial`.
    pub fn new(initial: f64, decay: Option<Decay>) -> EnergyLedger {
        EnergyLedger { target: initial, initial, added: 0.0, dissipated: 0.0, decay }
    }

    /// The energy the controlled integrators aim for now (J).
    pub fn target(&self) -> f64 {
        self.target
    }

    /// The target the run started from (J).
    pub fn initial(&self) -> f64 {
        self.initial
    }

    /// Energy put in by the user so far (J).
    pub fn added(&self) -> f64 {
        self.added
    }

    /// Energy taken out on purpose so far: damping and friction (J).
    pub fn dissipated(&self) -> f64 {
        self.dissipated
    }

    /// Books energy the user injected (moving handles) before a step.
    pub fn add(&mut self, energy: f64) {
        self.added += energy;
        self.target += energy;
    }

    /// Books energy removed on purpose during a step.
    pub fn dissipate(&mut self, energy: f64) {
        self.dissipated += energy;
        self.target -= energy;
    }

    /// Advances the decay over one step of length `dt` (after the step's dissipation is booked).
    pub fn advance(&mut self, dt: f64) {
        if let Some(Decay { time_constant, ground }) = self.decay {
            self.target = ground + (-dt / time_constant).exp() * (self.target - ground);
        }
    }

    /// Restarts the account at `initial` (a new state, or a target the user sets).
    pub fn reset(&mut self, initial: f64) {
        *self = EnergyLedger::new(initial, self.decay);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_is_initial_plus_added_minus_dissipated() {
        let mut ledger = EnergyLedger::new(10.0, None);
        ledger.add(3.0);
        ledger.dissipate(1.5);
        ledger.advance(0.1);
        assert_eq!(ledger.target(), 11.5);
        assert_eq!((ledger.added(), ledger.dissipated()), (3.0, 1.5));
    }

    #[test]
    fn decay_follows_the_exponential_toward_ground() {
        let decay = Decay { time_constant: 2.0, ground: 1.0 };
        let mut ledger = EnergyLedger::new(5.0, Some(decay));
        for _ in 0..30 {
            ledger.advance(0.1);
        }
        let expected = 1.0 + 4.0 * (-3.0f64 / 2.0).exp();
        assert!((ledger.target() - expected).abs() < 1e-12);
    }
}
