//! Helpers shared by the integration tests.
#![allow(dead_code)]

use lively::{Integrator, Simulation};

/// Every integrator, plain and energy-controlled.
pub const ALL_INTEGRATORS: [Integrator; 10] = Integrator::ALL;

/// The plain (not energy-controlled) integrators: the first seven.
pub fn plain_integrators() -> &'static [Integrator] {
    &ALL_INTEGRATORS[..7]
}

/// The rotating spring preset.
pub fn rotating_spring(integrator: Integrator) -> Simulation {
    lively::presets::rotating_spring(integrator).expect("valid preset")
}

/// A 0.6 m StVK bar (6x2x2 cells) stretched along x by `stretch` and released, no gravity.
pub fn stretched_bar(integrator: Integrator, youngs: f64, stretch: f64) -> Simulation {
    lively::presets::stretched_bar(integrator, [6, 2, 2], [0.6, 0.2, 0.2], youngs, stretch)
        .expect("valid preset")
}

/// The spinning cube preset.
pub fn spinning_cube(integrator: Integrator) -> Simulation {
    lively::presets::spinning_cube(integrator).expect("valid preset")
}

/// A free corotated cube of 0.1 m and `cells`, steel-stiff (E 1e11 Pa, rho 1000), under
/// gravity at 1/30 s by backward Euler with `solver`, released squashed to 0.3 of its size at
/// rest: `h^2 E / (rho dx^2)` is 7e8 at 8x4x4 cells.
pub fn squashed_steel_cube(
    cells: [usize; 3],
    solver: lively::Solver,
    backend: lively::Backend,
) -> Simulation {
    squashed_steel_cube_on(cells, solver, |builder| on_backend(builder, backend))
}

/// [`squashed_steel_cube`] with `place` choosing its backend (and GPU context).
pub fn squashed_steel_cube_on(
    cells: [usize; 3],
    solver: lively::Solver,
    place: impl FnOnce(lively::SimulationBuilder) -> lively::SimulationBuilder,
) -> Simulation {
    let builder = Simulation::builder()
        .tet_body(lively::TetMesh::bar(cells, [0.1; 3]), lively::Material::corotated(1e11, 0.44), 1000.0)
        .gravity([0.0, -9.81, 0.0])
        .dt(1.0 / 30.0)
        .integrator(Integrator::BackwardEuler)
        .solver(solver);
    let mut sim = place(builder).build().expect("valid scene");
    let squashed: Vec<[f64; 3]> = sim.positions().iter().map(|p| p.map(|c| 0.3 * c)).collect();
    sim.set_state(&squashed, &vec![[0.0; 3]; squashed.len()]).unwrap();
    sim
}

/// A bar of 0.1 x 0.2 x 0.2 m pinned at x = 0, its near half `youngs` Pa fixed corotated and
/// its far half 100 Pa StVK (2300 kg/m^3), squashed to 0.3 x 0.3 x 0.55 at rest and released
/// under A-search (no decay) at h = 0.5 s, Newton to 1e-3 N, its energy target 0.56 of the
/// squash's: the release turns the strain into hundreds of m/s, and the next step's
/// predictions lie hundreds of metres out.
pub fn squash_released_bar(youngs: f64, backend: lively::Backend) -> Simulation {
    squash_released_bar_with_end(youngs, 100.0, backend)
}

/// [`squash_released_bar`] with a far half of `end_youngs` Pa.
pub fn squash_released_bar_with_end(youngs: f64, end_youngs: f64, backend: lively::Backend) -> Simulation {
    let solver = lively::Solver::newton().tolerance(1e-3).max_iterations(100);
    squash_released_bar_solved_by(youngs, end_youngs, solver, backend)
}

/// [`squash_released_bar_with_end`] solved by `solver`.
pub fn squash_released_bar_solved_by(
    youngs: f64,
    end_youngs: f64,
    solver: lively::Solver,
    backend: lively::Backend,
) -> Simulation {
    let size = [0.1, 0.2, 0.2];
    let material_at = move |c: [f64; 3]| match c[0] > 0.5 * size[0] {
        true => lively::Material::stvk(end_youngs, 0.2),
        false => lively::Material::fixed_corotated(youngs, 0.2),
    };
    let builder = Simulation::builder()
        .tet_body_graded(lively::TetMesh::bar([1, 2, 2], size), material_at, 2300.0)
        .dt(0.5)
        .gravity([0.0, -9.81, 0.0])
        .integrator(Integrator::ASearch { alpha_min: 0.0, alpha_max: 1.0, decay: None })
        .solver(solver)
        .pin(|p| p[0] == 0.0);
    let mut sim = on_backend(builder, backend).build().expect("valid scene");
    let squashed: Vec<[f64; 3]> =
        sim.positions().iter().map(|p| [0.3 * p[0], 0.3 * p[1], 0.55 * p[2]]).collect();
    sim.set_state(&squashed, &vec![[0.0; 3]; squashed.len()]).unwrap();
    let target = 0.56 * sim.energy().total;
    sim.set_energy_target(target).unwrap();
    sim
}

/// A 0.1 m cube (4x4x4 cells) thrown at 2.2 m/s, spinning at `spin` rad/s about a tilted
/// axis, under gravity, on `backend`, by backward Euler.
pub fn thrown_cube(youngs: f64, spin: f64, solver: lively::Solver, backend: lively::Backend) -> Simulation {
    thrown_cube_by(Integrator::BackwardEuler, youngs, spin, solver, backend)
}

/// [`thrown_cube`] stepped by `integrator`.
pub fn thrown_cube_by(
    integrator: Integrator,
    youngs: f64,
    spin: f64,
    solver: lively::Solver,
    backend: lively::Backend,
) -> Simulation {
    let builder = Simulation::builder()
        .integrator(integrator)
        .tet_body(
            lively::TetMesh::bar([4, 4, 4], [0.1; 3]),
            lively::Material::corotated(youngs, 0.44),
            1000.0,
        )
        .gravity([0.0, -9.81, 0.0])
        .solver(solver);
    let mut sim = on_backend(builder, backend).build().unwrap();
    let x = sim.positions().to_vec();
    let w = [0.3 * spin, spin, 0.2 * spin];
    let v: Vec<[f64; 3]> = x
        .iter()
        .map(|p| {
            let r = [p[0] - 0.05, p[1] - 0.05, p[2] - 0.05];
            [w[1] * r[2] - w[2] * r[1] + 1.0, w[2] * r[0] - w[0] * r[2] + 2.0, w[0] * r[1] - w[1] * r[0]]
        })
        .collect();
    sim.set_state(&x, &v).unwrap();
    sim
}

/// The mean of the simulation's vertex positions.
pub fn centroid(sim: &lively::Simulation) -> [f64; 3] {
    let n = sim.positions().len() as f64;
    std::array::from_fn(|c| sim.positions().iter().map(|p| p[c]).sum::<f64>() / n)
}

/// Largest `|a - b|` over all coordinates, with the vertex where it happens.
pub fn worst_difference(a: &[[f64; 3]], b: &[[f64; 3]]) -> (f64, usize) {
    a.iter()
        .zip(b)
        .enumerate()
        .map(|(i, (p, q))| ((0..3).map(|c| (p[c] - q[c]).abs()).fold(0.0, f64::max), i))
        .fold((0.0, 0), |acc, e| if e.0 > acc.0 { e } else { acc })
}

/// The one GPU context of this test binary (one device per process: faster, and some drivers
/// crash when several tests open Vulkan instances at once). `None`, with a printed reason,
/// when there is no adapter, unless LIVELY_REQUIRE_GPU=1 (as in CI), where that fails. With
/// LIVELY_TEST_SHAPE=hardware a software adapter's context is shaped as on hardware (see
/// [`gpu_shapes`]), so that the whole suite can run hardware's shapes on lavapipe.
pub fn gpu() -> Option<std::sync::Arc<lively::backend::gpu::GpuContext>> {
    static CONTEXT: std::sync::OnceLock<Option<std::sync::Arc<lively::backend::gpu::GpuContext>>> =
        std::sync::OnceLock::new();
    CONTEXT
        .get_or_init(|| match lively::backend::gpu::GpuContext::new() {
            Ok(mut context) => {
                if std::env::var("LIVELY_TEST_SHAPE").as_deref() == Ok("hardware") {
                    context.software = false;
                }
                Some(std::sync::Arc::new(context))
            }
            Err(e) if std::env::var("LIVELY_REQUIRE_GPU").as_deref() == Ok("1") => {
                panic!("LIVELY_REQUIRE_GPU=1 but no GPU is usable: {e}")
            }
            Err(e) => {
                eprintln!("skipping GPU test: {e} (set LIVELY_REQUIRE_GPU=1 to make this a failure)");
                None
            }
        })
        .clone()
}

/// The GPU contexts whole steps are compared on: [`gpu`]'s, and, where that is a software
/// adapter (lavapipe, as in CI), a second context on it shaped as on hardware. A software
/// adapter's CG loops take one lane a row and one workgroup up to 2 048 vertices; hardware's
/// share a small body's rows among up to 16 lanes, and the sums run in another order. A free
/// steel-stiff cube's local/global solve was right with one lane and diverged with 16, on an
/// H200 and on lavapipe shaped so, and no test on lavapipe saw it.
#[allow(dead_code)]
pub fn gpu_shapes() -> Vec<(&'static str, std::sync::Arc<lively::backend::gpu::GpuContext>)> {
    static HARDWARE_SHAPED: std::sync::OnceLock<std::sync::Arc<lively::backend::gpu::GpuContext>> =
        std::sync::OnceLock::new();
    let Some(shared) = gpu() else { return Vec::new() };
    let mut shapes = vec![("GPU", shared.clone())];
    if shared.software {
        let shaped = HARDWARE_SHAPED.get_or_init(|| {
            let mut context =
                lively::backend::gpu::GpuContext::new().expect("the adapter opened once already");
            context.software = false;
            std::sync::Arc::new(context)
        });
        shapes.push(("GPU shaped as hardware", shaped.clone()));
    }
    shapes
}

/// The CPU, and the GPU where [`gpu`] has one.
#[allow(dead_code)]
pub fn backends() -> Vec<lively::Backend> {
    if gpu().is_some() {
        vec![lively::Backend::Cpu, lively::Backend::Gpu]
    } else {
        vec![lively::Backend::Cpu]
    }
}

/// `builder` on `backend`, on the shared GPU context when that is the GPU.
pub fn on_backend(builder: lively::SimulationBuilder, backend: lively::Backend) -> lively::SimulationBuilder {
    match (backend, gpu()) {
        (lively::Backend::Gpu, Some(context)) => builder.backend(backend).gpu_context(context),
        _ => builder.backend(backend),
    }
}

/// Round trips a stabilized step spends on its blends beyond its solves: forward Euler's
/// energy (evaluated unless it blended toward backward Euler), one per three bisection
/// levels — a blend found after L levels is a multiple of 2^-L, which `alpha` shows — and the
/// blended state's potential for the step's energy report (a solve's end state comes with
/// its own).
#[allow(dead_code)]
pub fn stabilized_blend_readbacks(alpha: f64) -> usize {
    let levels = (0..=50).find(|&l| (alpha * 2f64.powi(l)).fract() == 0.0).unwrap_or(50);
    usize::from(alpha <= 0.0) + (levels as usize).div_ceil(3) + usize::from(alpha != 0.0 && alpha != 1.0)
}

/// A property test's settings: `default_cases` cases (`PROPTEST_CASES` sets others) from a
/// fixed seed, so that CI runs the same cases every time (`PROPTEST_RNG_SEED` draws others),
/// and no failure files written into the tree.
pub fn property_config(default_cases: u32) -> proptest::test_runner::Config {
    use proptest::test_runner::{Config, RngSeed};
    let base = Config::default();
    Config {
        cases: if std::env::var_os("PROPTEST_CASES").is_some() { base.cases } else { default_cases },
        rng_seed: if base.rng_seed == RngSeed::Random { RngSeed::Fixed(20_261_128) } else { base.rng_seed },
        failure_persistence: None,
        ..base
    }
}

/// The preset scene files in `scenes/`, in name order.
pub fn preset_scenes() -> Vec<std::path::PathBuf> {
    let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenes");
    let mut files: Vec<_> = std::fs::read_dir(&folder)
        .expect("scenes/ exists")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}
