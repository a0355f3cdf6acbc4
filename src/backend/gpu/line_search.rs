//! Stage `line_search` (`shaders/line_search.wgsl`), the GPU twin of
//! `backend/cpu/line_search.rs`: a fixed-budget solve's choice of initial guess and step
//! length, made on the device from the partial sums the other stages leave, so that a whole
//! budgeted solve is recorded without a readback.

use encase::ShaderType;

use super::buffers::GpuBuffers;
use super::context::GpuContext;
use super::recording::{Recording, Staged};
use super::stage::{Bound, WORKGROUP, WgStage};
use crate::error::Result;

/// Candidate slots of [`SearchRecord`]: the guesses, or a line search's steps and `2`.
pub const CANDIDATES: usize = 8;
/// The slot `energy` writes for the iterate's own objective; `take_guess`'s for the picked guess.
const VALUE: u32 = u32::MAX;
/// `SearchRecord::picked` when no guess has a finite objective.
pub const NONE: u32 = u32::MAX;

/// The shader's `Search`: what the solve knows of its iterate and direction.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SearchRecord {
    /// `G` at the iterate.
    pub value: f32,
    /// The step length taken last.
    pub alpha: f32,
    pub gradient_norm: f32,
    pub force_scale: f32,
    pub noise_floor: f32,
    /// `grad G . d`.
    pub slope: f32,
    pub direction_norm: f32,
    /// The guess taken ([`NONE`] when none has a finite objective).
    pub picked: u32,
    /// What the next direction is scaled by (`cpu::line_search::next_scale`).
    pub scale: f32,
    pub candidates: [f32; CANDIDATES],
}

/// Parameters of `shaders/line_search.wgsl`.
#[derive(Clone, Copy, Debug, Default, ShaderType)]
pub struct LineSearchParams {
    pub vertex_count: u32,
    pub energy_partial_count: u32,
    pub vertex_partial_count: u32,
    pub slot: u32,
    pub count: u32,
    pub extrapolate: u32,
    pub fallback: u32,
}

/// The line-search stage's pipelines.
pub struct WgLineSearch(pub(crate) WgStage);

/// The line-search stage bound to one model's buffers.
pub struct LineSearchGroups {
    param: super::recording::ParamGroup,
    groups: Bound,
    base: LineSearchParams,
}

/// What one dispatch of the stage does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Decision {
    /// The objectives of the last energy pass and gather, over `count` positions, into the
    /// candidate slots from `Some(k)` on, or as the iterate's value (`None`, one position).
    Energy { slot: Option<usize>, count: usize },
    /// After a solve: `|grad G|`, force scale and noise floor of the linearization (from
    /// its gather's partials), and the slope and length of the direction from the last dots.
    Direction,
    /// [`Direction`](Self::Direction) for a mixed-FEM step: its slope adds the tets' part
    /// (the first `tet_partials` energy partials, from the mixed stage's `local_update`), and
    /// its direction is never rescaled.
    MixedDirection { tet_partials: u32 },
    /// The initial guess among `count` candidates, the last a fallback when `fallback`.
    Pick { count: usize, fallback: bool },
    /// The step among `steps` candidates (and `2` after them when `extrapolate`).
    Choose { steps: usize, extrapolate: bool },
    /// `x` = guess `Some(k)`, or the picked one (`None`).
    TakeGuess(Option<usize>),
    /// `x = x_saved + alpha d` with the chosen step.
    Advance,
    /// The line search starts: `x_saved = x`, and `d *= scale` (after a batch that found no
    /// decrease, the next goes on from its end).
    StartSearch,
    /// The step length `Advance` takes: the least of the contact stage's bounds.
    Bound,
}

impl WgLineSearch {
    pub fn new(context: &GpuContext) -> Result<WgLineSearch> {
        Ok(WgLineSearch(WgStage::new(context, "line_search")?))
    }

    pub fn bind(
        &self,
        context: &GpuContext,
        recording: &Recording,
        buffers: &GpuBuffers,
        energy_partials: usize,
    ) -> Result<LineSearchGroups> {
        Ok(LineSearchGroups {
            param: recording.param_group(context, &self.0),
            groups: self.0.bind(context, |g, n| buffers.resolve(g, n))?,
            base: LineSearchParams {
                vertex_count: buffers.vertex_count as u32,
                energy_partial_count: energy_partials as u32,
                vertex_partial_count: buffers.vertex_workgroups(),
                ..LineSearchParams::default()
            },
        })
    }

    /// Records `decision`.
    pub fn queue(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &LineSearchGroups,
        decision: Decision,
    ) -> Result<()> {
        let slot = |k: Option<usize>| k.map_or(VALUE, |k| k as u32);
        let base = groups.base;
        let (entry, params, threads) = match decision {
            Decision::Energy { slot: k, count } => {
                debug_assert!(k.map_or(count == 1, |k| k + count <= CANDIDATES));
                ("energy", LineSearchParams { slot: slot(k), ..base }, count as u32 * WORKGROUP)
            }
            Decision::Direction => ("after_solve", base, WORKGROUP),
            Decision::MixedDirection { tet_partials } => {
                ("after_solve", LineSearchParams { count: tet_partials, ..base }, WORKGROUP)
            }
            Decision::Pick { count, fallback } => {
                debug_assert!(count <= CANDIDATES);
                ("pick", LineSearchParams { count: count as u32, fallback: fallback as u32, ..base }, 1)
            }
            Decision::Choose { steps, extrapolate } => {
                debug_assert!(steps + usize::from(extrapolate) <= CANDIDATES);
                let params =
                    LineSearchParams { count: steps as u32, extrapolate: extrapolate as u32, ..base };
                ("choose", params, 1)
            }
            Decision::TakeGuess(k) => {
                ("take_guess", LineSearchParams { slot: slot(k), ..base }, 3 * base.vertex_count)
            }
            Decision::Advance => ("advance", base, 3 * base.vertex_count),
            Decision::StartSearch => ("start_search", base, 3 * base.vertex_count),
            Decision::Bound => ("bound", base, WORKGROUP),
        };
        let offset = recording.params(context, &params)?;
        let bound = &groups.groups;
        let workgroups = if threads <= WORKGROUP { 1 } else { threads.div_ceil(WORKGROUP) };
        recording.dispatch(context, self.0.kernel(entry), &groups.param, offset, bound, workgroups);
        Ok(())
    }

    /// Stages the search record as it is at this point of the recording.
    pub fn stage(context: &GpuContext, recording: &mut Recording, buffers: &GpuBuffers) -> Result<Staged> {
        let search = buffers.scratch.named("search");
        recording.stage(context, search, std::mem::size_of::<SearchRecord>() as u64)
    }
}

#[cfg(test)]
mod tests {
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::{CANDIDATES, Decision, NONE, SearchRecord, WgLineSearch};
    use crate::backend::cpu::line_search::{choose, next_scale, pick, step_lengths};
    use crate::backend::gpu::test_support::{Rig, context, linear_model};
    use crate::material::Material;

    fn run(rig: &mut Rig, search: &SearchRecord, decisions: &[Decision]) -> SearchRecord {
        rig.upload(3, "search", &[*search]);
        let partials = crate::backend::gpu::element::partial_count(&rig.model);
        let groups = rig.stages.line_search.bind(&rig.context, &rig.rec, &rig.buffers, partials).unwrap();
        for &decision in decisions {
            rig.stages.line_search.queue(&rig.context, &mut rig.rec, &groups, decision).unwrap();
        }
        let staged = WgLineSearch::stage(&rig.context, &mut rig.rec, &rig.buffers).unwrap();
        let out = bytemuck::pod_read_unaligned(&rig.rec.read(&rig.context, &[staged]).unwrap()[0]);
        assert!(rig.context.take_failure().is_none());
        out
    }

    /// On random objectives along random directions — some overshooting, some flat at the
    /// noise, some infinite — and random guesses: the same step and guess as the CPU twin,
    /// and the reductions, the guess taken and the step applied agree with f64 sums.
    #[test]
    fn line_search_stage_matches_its_cpu_twin() {
        let Some(context) = context() else { return };
        let model = linear_model(Material::stvk(1e4, 0.3));
        let mut rig = Rig::new(&context, &model);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut outcomes = [0usize; 4];
        for case in 0..200 {
            // G(t) = value + slope t + c t^2 at t = 1, 1/2, 1/4, 1/8, 1/64, 1/512 and 2.
            let value = rng.random_range(-50.0..50.0f32);
            let slope =
                if case % 10 == 0 { rng.random_range(0.0..1.0f32) } else { -rng.random_range(1e-3..10.0f32) };
            let curvature = rng.random_range(-2.0..20.0f32) * slope.abs();
            let noise_floor = if case % 7 == 0 { 10.0 * slope.abs() } else { 1e-7 };
            let (steps, extrapolate) = (6, case % 2 == 0);
            let mut candidates = [0.0f32; CANDIDATES];
            for (k, &t) in step_lengths(steps, extrapolate).iter().enumerate() {
                candidates[k] = value + slope * t as f32 + curvature * (t * t) as f32;
            }
            if case % 5 == 1 {
                candidates[0] = f32::INFINITY;
            }
            if case % 13 == 3 {
                // No step of the batch is admissible: the next batch goes on.
                candidates = [f32::INFINITY; CANDIDATES];
            }
            let scale = 0.5;
            let search =
                SearchRecord { value, slope, noise_floor, scale, candidates, ..SearchRecord::default() };
            let gpu = run(&mut rig, &search, &[Decision::Choose { steps, extrapolate }]);
            let values: Vec<f64> = candidates.iter().map(|&v| v as f64).collect();
            let (alpha, next) = choose(
                value as f64,
                slope as f64,
                noise_floor as f64,
                f32::EPSILON as f64,
                steps,
                extrapolate,
                |k| values[k],
            );
            assert_eq!((gpu.alpha as f64, gpu.value as f64), (alpha, next), "case {case}: {search:?}");
            assert_eq!(gpu.scale as f64, next_scale(scale as f64, alpha, slope as f64), "case {case}");
            outcomes[match alpha {
                0.0 => 0,
                1.0 => 1,
                2.0 => 2,
                _ => 3,
            }] += 1;

            // A pick among three or four guesses, some infinite.
            let count = 3 + case % 2;
            let mut guesses = [0.0f32; CANDIDATES];
            for g in guesses.iter_mut().take(count) {
                *g = if rng.random_range(0.0..1.0) < 0.3 {
                    f32::INFINITY
                } else {
                    rng.random_range(-5.0..5.0)
                };
            }
            let search = SearchRecord { candidates: guesses, ..SearchRecord::default() };
            let gpu = run(&mut rig, &search, &[Decision::Pick { count, fallback: true }]);
            let values: Vec<f64> = guesses[..count].iter().map(|&v| v as f64).collect();
            let cpu = pick(&values, true);
            assert_eq!(gpu.picked, cpu.map_or(NONE, |k| k as u32), "case {case}: {values:?}");
        }
        // Every branch of the rule was taken.
        println!("no step / full / doubled / halved: {outcomes:?}");
        assert!(outcomes.iter().all(|&n| n > 0), "{outcomes:?}");

        // The reductions, against f64 sums of the same random partials.
        let vertex_partials = rig.buffers.vertex_workgroups() as usize;
        let energy_partials = crate::backend::gpu::element::partial_count(&model);
        let energy: Vec<f32> = (0..energy_partials).map(|_| rng.random_range(0.0..10.0)).collect();
        let gather: Vec<[f32; 4]> =
            (0..vertex_partials).map(|_| std::array::from_fn(|_| rng.random_range(0.0..10.0))).collect();
        // (g.d, d.d, g.g, 0)
        let dots: Vec<[f32; 4]> = (0..vertex_partials)
            .map(|_| {
                [rng.random_range(-10.0..10.0), rng.random_range(0.0..10.0), rng.random_range(0.0..10.0), 0.0]
            })
            .collect();
        rig.upload(3, "energy_partials", &energy);
        rig.upload(3, "gather_partials", &gather);
        rig.upload(3, "dot_partials", &dots);
        // The slope and norm come scaled as `start_search` will scale the direction.
        let gpu = run(
            &mut rig,
            &SearchRecord { scale: 0.5, ..SearchRecord::default() },
            &[
                Decision::Energy { slot: None, count: 1 },
                Decision::Energy { slot: Some(5), count: 1 },
                Decision::Direction,
            ],
        );
        let sum = |lane: usize, p: &[[f32; 4]]| p.iter().map(|v| v[lane] as f64).sum::<f64>();
        let objective = energy.iter().map(|&e| e as f64).sum::<f64>() + sum(0, &gather);
        let close = |a: f32, b: f64| (a as f64 - b).abs() <= 1e-6 * b.abs().max(1.0);
        assert!(close(gpu.value, objective) && close(gpu.candidates[5], objective), "{gpu:?} vs {objective}");
        assert!(close(gpu.gradient_norm, sum(1, &gather).sqrt()), "{gpu:?}");
        assert!(close(gpu.force_scale, sum(2, &gather)), "{gpu:?}");
        assert!(close(gpu.noise_floor, sum(3, &gather).sqrt()), "{gpu:?}");
        assert!(
            close(gpu.slope, 0.5 * sum(0, &dots)) && close(gpu.direction_norm, 0.5 * sum(1, &dots).sqrt()),
            "{gpu:?}"
        );
        // A mixed-FEM direction adds its tets' slope partials (those before the springs'),
        // and is not rescaled.
        let tet_partials = energy_partials.div_ceil(2);
        let gpu = run(
            &mut rig,
            &SearchRecord { scale: 0.5, ..SearchRecord::default() },
            &[Decision::MixedDirection { tet_partials: tet_partials as u32 }],
        );
        let tet_slope = energy[..tet_partials].iter().map(|&e| e as f64).sum::<f64>();
        assert!(tet_partials > 0 && tet_slope != 0.0);
        assert!(close(gpu.slope, sum(0, &dots) + tet_slope), "{gpu:?} vs {}", sum(0, &dots) + tet_slope);
        assert!(close(gpu.direction_norm, sum(1, &dots).sqrt()) && gpu.scale == 1.0, "{gpu:?}");
        assert!(close(gpu.gradient_norm, sum(1, &gather).sqrt()), "{gpu:?}");

        // A batch of three passes' partials, one member's after another, into slots 2-4.
        let members = 3;
        let energy: Vec<f32> = (0..members * energy_partials).map(|_| rng.random_range(0.0..10.0)).collect();
        let gather: Vec<[f32; 4]> = (0..members * vertex_partials)
            .map(|_| std::array::from_fn(|_| rng.random_range(0.0..10.0)))
            .collect();
        rig.upload(3, "energy_partials", &energy);
        rig.upload(3, "gather_partials", &gather);
        let gpu =
            run(&mut rig, &SearchRecord::default(), &[Decision::Energy { slot: Some(2), count: members }]);
        for j in 0..members {
            let objective =
                energy[j * energy_partials..(j + 1) * energy_partials].iter().map(|&e| e as f64).sum::<f64>()
                    + sum(0, &gather[j * vertex_partials..(j + 1) * vertex_partials]);
            assert!(close(gpu.candidates[2 + j], objective), "member {j}: {gpu:?} vs {objective}");
        }

        // Taking a guess and advancing by the chosen step.
        let n = 3 * rig.buffers.vertex_count;
        let random = |rng: &mut ChaCha8Rng, len: usize| -> Vec<f32> {
            (0..len).map(|_| rng.random_range(-1.0..1.0)).collect()
        };
        let guesses = random(&mut rng, 3 * n);
        rig.upload(3, "batch", &guesses);
        let search = SearchRecord { picked: 2, ..SearchRecord::default() };
        run(&mut rig, &search, &[Decision::TakeGuess(None)]);
        assert_eq!(rig.read(2, "x", n), guesses[2 * n..]);
        run(&mut rig, &search, &[Decision::TakeGuess(Some(1))]);
        assert_eq!(rig.read(2, "x", n), guesses[n..2 * n]);
        let (saved, direction) = (random(&mut rng, n), random(&mut rng, n));
        rig.upload(3, "x_saved", &saved);
        rig.upload(3, "direction", &direction);
        run(&mut rig, &SearchRecord { alpha: 0.25, ..SearchRecord::default() }, &[Decision::Advance]);
        let x = rig.read(2, "x", n);
        for i in 0..n {
            assert!((x[i] - (saved[i] + 0.25 * direction[i])).abs() <= 1e-6, "entry {i}");
        }
        // The search starts from the iterate just advanced to, along the scaled direction.
        run(
            &mut rig,
            &SearchRecord { scale: 1.0 / 128.0, ..SearchRecord::default() },
            &[Decision::StartSearch],
        );
        let scaled = rig.read(3, "direction", n);
        assert_eq!(rig.read(3, "x_saved", n), x);
        for i in 0..n {
            assert_eq!(scaled[i], direction[i] / 128.0, "entry {i}");
        }
    }

    /// `Bound` takes the least of the contact stage's partial bounds, and 1 when none is less,
    /// as `contact::WgContact::bound` reads them on the host.
    #[test]
    fn the_bound_decision_takes_the_least_partial() {
        let Some(context) = context() else { return };
        // Enough vertices for several workgroups of partials.
        let mut model = crate::model::Model::empty([0.0; 3]);
        let bar = crate::mesh::TetMesh::bar([30, 10, 10], [3.0, 1.0, 1.0]);
        model.add_tet_body(&bar, &[Material::stvk(1e4, 0.3)], 1000.0).unwrap();
        let mut rig = Rig::new(&context, &std::sync::Arc::new(model));
        let count = rig.buffers.vertex_workgroups() as usize;
        assert!(count > 10, "{count} partials");
        let mut rng = ChaCha8Rng::seed_from_u64(23);
        for case in 0..20 {
            let partials: Vec<f32> = (0..count)
                .map(|_| if case % 4 == 0 { 1.0 } else { rng.random_range(0.01..1.0f32) })
                .collect();
            rig.upload(3, "bound_partials", &partials);
            let search = SearchRecord { alpha: -1.0, ..SearchRecord::default() };
            let out = run(&mut rig, &search, &[Decision::Bound]);
            let host = crate::backend::gpu::contact::WgContact::bound(bytemuck::cast_slice(&partials));
            assert_eq!(out.alpha as f64, host, "case {case}: {partials:?}");
        }
    }
}
