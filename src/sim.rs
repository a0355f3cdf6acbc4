//! `Simulation`: the fixed-step driver, its builder, and the statistics it reports.

use std::sync::Arc;
use std::time::{Duration, Instant};

use glam::DVec3;

use crate::backend::cpu::CpuBackend;
use crate::backend::gpu::{DeviceCounts, GpuBackend, GpuContext};
use crate::backend::{Anchor, Stages};
use crate::contact::{Collider, ContactModel};
use crate::damping::Damping;
use crate::error::{Error, Result};
use crate::integrator::rigid_guess::FreeParts;
use crate::integrator::{EnergyLedger, Integrator, Outcome, StepInput, Stepper, kinetic_energy};
use crate::material::Material;
use crate::mesh::{SpringMesh, TetMesh};
use crate::model::Model;
use crate::objective::LaggedDamping;
use crate::solver::Solver;
use crate::solver::{PhaseTimes, SolveReport};
use crate::state::State;

/// Where the element and linear-algebra stages run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The f64 CPU reference.
    Cpu,
    /// WGSL compute shaders through wgpu.
    Gpu,
    /// The GPU when one is available, otherwise the CPU.
    Auto,
}

/// Wall-clock time per phase of one step.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepTimings {
    /// The whole step.
    pub total: Duration,
    /// Element passes (objective, gradient, Hessian) and assembly.
    pub evaluate: Duration,
    /// Linear solves.
    pub linear_solve: Duration,
    /// Local solves after a global one (the mixed solver's stretch and multiplier updates).
    pub local_solve: Duration,
    /// Line searches.
    pub line_search: Duration,
    /// CPU time of the thread that ran the step (Linux; `None` elsewhere). On a GPU backend it
    /// is the host's own work — recording, wgpu's encoding and submission, the bookkeeping —
    /// without the waits for the device, which `total` includes. Work the step hands to the
    /// worker pool (host passes over bodies above a few thousand vertices) is not in it.
    pub thread_cpu: Option<Duration>,
}

/// What one step did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepStats {
    /// Outer solver iterations (Newton or local/global iterations).
    pub iterations: usize,
    /// Inner linear-solver iterations summed over the step.
    pub linear_iterations: usize,
    /// Newton iterations that used PSD-projected element Hessians.
    pub projected_iterations: usize,
    /// Iterations solved on a second request: where the solve likely ends (after a flat step
    /// at the gradient's noise, as on an f32 GPU) the backend leaves the direction out, and
    /// solves it when the solver goes on (a GPU's Newton linearizes again for it, mixed FEM
    /// solves from the linearization it kept).
    pub resumed_iterations: usize,
    /// The blend factor of the energy-controlled integrators (negative: forward-Euler side).
    pub alpha: Option<f64>,
    /// Every solve of the step reached its tolerance, or the round-off limit below it
    /// (explicit steps always report true).
    pub converged: bool,
    /// Some solve stopped above its tolerance because the objective could not resolve
    /// further progress in f64.
    pub round_off: bool,
    /// How the step's solves ended (the most serious of them): whether the state is the
    /// converged implicit step or a budget's or a stall's best. `SimulationBuilder::strict`
    /// makes the last two an error.
    pub outcome: SolveOutcome,
    /// Final gradient norm of the step objective (N); zero for explicit steps.
    pub gradient_norm: f64,
    /// How much the step's solves lowered their objectives (J): what an iteration budget
    /// bought.
    pub objective_decrease: f64,
    /// Energy removed on purpose this step — damping and friction — as booked in the ledger (J).
    pub dissipated: f64,
    /// Time per phase.
    pub timings: StepTimings,
    /// Device work of the step — submissions, readbacks (host waits), compute passes and
    /// dispatches — on a GPU backend.
    pub device: Option<DeviceCounts>,
    /// The step objective at the start and after every iteration, one list per solve
    /// (a stabilized step: midpoint, then the backward-Euler blend), when the solver records
    /// them ([`Solver::record_objectives`](crate::Solver::record_objectives)); empty otherwise.
    pub objectives: Vec<Vec<f64>>,
}

/// How a step's implicit solves ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SolveOutcome {
    /// Every solve reached its gradient tolerance (explicit steps solve nothing).
    #[default]
    Converged,
    /// Some solve stopped above its tolerance because the objective could not resolve
    /// further progress (f64 on the CPU, f32 on a GPU): the best the arithmetic allows.
    RoundOff,
    /// Some solve used its iteration budget before reaching the tolerance (the expected
    /// outcome of `Solver::budget`): the state is the budget's best, not the converged step.
    BudgetSpent,
    /// Some solve found no way forward (no decrease along a downhill direction, or a
    /// non-finite gradient): the state is the last safe iterate.
    Stalled,
}

/// Energies of the current state (J).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EnergyReport {
    /// `1/2 v^T M v`.
    pub kinetic: f64,
    /// Elastic, spring and gravitational potential.
    pub potential: f64,
    /// `kinetic + potential`.
    pub total: f64,
    /// The energy the controlled integrators aim for: the ledger's target (initial energy,
    /// plus what the user put in, minus what damping and friction took out, decayed if asked).
    pub target: f64,
}

/// The CPU time the calling thread has used, where the platform counts it.
#[cfg(target_os = "linux")]
fn thread_cpu_time() -> Option<Duration> {
    let mut time = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `time` is a valid, writable timespec for the call's duration.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    (status == 0).then(|| Duration::new(time.tv_sec as u64, time.tv_nsec as u32))
}

#[cfg(not(target_os = "linux"))]
fn thread_cpu_time() -> Option<Duration> {
    None
}

/// The threads the CPU stages run on. Steps run *inside* this pool, so the calling thread
/// sleeps instead of competing with spinning workers for the cores (on a 2-core machine that
/// contention cost a third of every step).
fn worker_pool() -> &'static rayon::ThreadPool {
    static POOL: std::sync::OnceLock<rayon::ThreadPool> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("lively-{i}"))
            .build()
            .or_else(|_| rayon::ThreadPoolBuilder::new().num_threads(1).build())
            .expect("a one-thread pool can always be built")
    })
}

/// How long a step waits for the pool's idle workers to start polling before it goes on
/// without the ones that have not.
const POLLERS_START: std::time::Duration = std::time::Duration::from_micros(100);
/// Empty polls after which a polling worker offers its core to the system's other threads
/// before each further poll (it stays awake: no futex, no wake-up to wait for).
const IDLE_SPINS: u32 = 64;

/// Sets its flag when dropped: on return and on unwinding alike.
struct SetOnDrop<'a>(&'a std::sync::atomic::AtomicBool, bool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(self.1, std::sync::atomic::Ordering::Release);
    }
}

/// Runs `work` (on a thread of the worker pool) while the pool's other workers poll for its
/// jobs instead of going to sleep between them. A step alternates short parallel passes with
/// serial ones (the linear solve of a small body), and a worker that has gone to sleep in
/// between costs a wake-up (futex and scheduler) each time it is wanted again: ~15 % of a
/// 960-tet step's CPU time, 20 % of its frame time.
///
/// A poller runs nothing but pending jobs, until `work` returns; while there are none for a
/// while it yields its core to the system between polls. One must never start on a
/// thread that is in the middle of one of `work`'s jobs (it would keep that job from
/// finishing, and `work` from returning): so the pollers are started before `work` makes any
/// job, and the ones no idle worker has taken up within [`POLLERS_START`] are cancelled. Only
/// one step at a time polls; one that finds the pool polling for another runs as it would
/// without.
fn with_workers_awake<R: Send>(work: impl FnOnce() -> R + Send) -> R {
    use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::AcqRel, Ordering::Acquire};
    static POLLING: AtomicBool = AtomicBool::new(false);
    let helpers = rayon::current_num_threads().saturating_sub(1);
    if helpers == 0 || POLLING.swap(true, AcqRel) {
        return work();
    }
    let _release = SetOnDrop(&POLLING, false);
    const PENDING: u8 = 0;
    const STARTED: u8 = 1;
    const CANCELLED: u8 = 2;
    let states: Vec<AtomicU8> = (0..helpers).map(|_| AtomicU8::new(PENDING)).collect();
    let done = AtomicBool::new(false);
    rayon::scope(|scope| {
        let _finish = SetOnDrop(&done, true);
        for state in &states {
            let done = &done;
            scope.spawn(move |_| {
                if state.compare_exchange(PENDING, STARTED, AcqRel, Acquire).is_ok() {
                    let mut idle = 0u32;
                    while !done.load(Acquire) {
                        if rayon::yield_now() == Some(rayon::Yield::Executed) {
                            idle = 0;
                        } else if idle < IDLE_SPINS {
                            idle += 1;
                            std::hint::spin_loop();
                        } else {
                            // Let the application's other threads have the core meanwhile.
                            std::thread::yield_now();
                        }
                    }
                }
            });
        }
        let deadline = std::time::Instant::now() + POLLERS_START;
        while states.iter().any(|state| state.load(Acquire) == PENDING) {
            if std::time::Instant::now() >= deadline {
                for state in &states {
                    _ = state.compare_exchange(PENDING, CANCELLED, AcqRel, Acquire);
                }
                break;
            }
            std::hint::spin_loop();
        }
        work()
    })
}

type PinPredicate = Box<dyn Fn(&[f64; 3]) -> bool>;

/// Marks the vertices the pins select, or says which pin selects none and where the rest
/// shape lies (its bounds), leaving the model's pins as they were.
fn pin_vertices(model: &mut Model, pins: &[PinPredicate]) -> Result<()> {
    let mut selects_any = vec![false; pins.len()];
    let pinned: Vec<bool> = (model.rest.iter())
        .map(|p| {
            let mut hit = false;
            for (pin, any) in pins.iter().zip(&mut selects_any) {
                if pin(p) {
                    (*any, hit) = (true, true);
                }
            }
            hit
        })
        .collect();
    if let Some(empty) = selects_any.iter().position(|any| !any) {
        let (low, high) =
            model.rest.iter().fold(([f64::INFINITY; 3], [f64::NEG_INFINITY; 3]), |(lo, hi), p| {
                (std::array::from_fn(|k| lo[k].min(p[k])), std::array::from_fn(|k| hi[k].max(p[k])))
            });
        return Err(Error::Parameter(format!(
            "pin {empty} (the builder's .pin calls count from 0) holds for no vertex; the rest \
             positions span x [{}, {}], y [{}, {}], z [{}, {}]",
            low[0], high[0], low[1], high[1], low[2], high[2]
        )));
    }
    model.pinned = pinned;
    Ok(())
}

enum Body {
    /// One material for the body, or one per tet.
    Tets {
        mesh: TetMesh,
        materials: Vec<Material>,
        density: f64,
    },
    Springs(SpringMesh),
}

/// Builds a [`Simulation`]; see the crate docs for an example.
pub struct SimulationBuilder {
    bodies: Vec<Body>,
    dt: f64,
    gravity: [f64; 3],
    integrator: Integrator,
    solver: Solver,
    /// `None` until chosen: then the GPU where a device was given, the CPU otherwise.
    backend: Option<Backend>,
    pins: Vec<PinPredicate>,
    colliders: Vec<Collider>,
    contact_model: Option<ContactModel>,
    self_collision: Option<crate::SelfCollision>,
    damping: Vec<Damping>,
    gpu: Option<Arc<GpuContext>>,
    strict: bool,
}

impl SimulationBuilder {
    /// Adds a tetrahedral body of `material` with mass density `density` (kg/m^3).
    pub fn tet_body(mut self, mesh: TetMesh, material: Material, density: f64) -> Self {
        self.bodies.push(Body::Tets { mesh, materials: vec![material], density });
        self
    }

    /// Adds a tetrahedral body with one material per tet, in the mesh's tet order: soft flesh
    /// with stiff inclusions, say. A count other than the mesh's tets is refused by `build`.
    pub fn tet_body_per_tet(mut self, mesh: TetMesh, materials: Vec<Material>, density: f64) -> Self {
        self.bodies.push(Body::Tets { mesh, materials, density });
        self
    }

    /// Adds a tetrahedral body whose tets take `material_at(c)`, `c` the tet's rest centroid
    /// (m).
    pub fn tet_body_graded(
        self,
        mesh: TetMesh,
        material_at: impl Fn([f64; 3]) -> Material,
        density: f64,
    ) -> Self {
        let materials = mesh
            .tets()
            .iter()
            .map(|tet| {
                let corners = tet.map(|v| mesh.positions()[v as usize]);
                material_at(std::array::from_fn(|c| corners.iter().map(|p| p[c]).sum::<f64>() / 4.0))
            })
            .collect();
        self.tet_body_per_tet(mesh, materials, density)
    }

    /// Adds a mass-spring body.
    pub fn spring_body(mut self, mesh: SpringMesh) -> Self {
        self.bodies.push(Body::Springs(mesh));
        self
    }

    /// Time step (s); default 1/30.
    pub fn dt(mut self, dt: f64) -> Self {
        self.dt = dt;
        self
    }

    /// Gravitational acceleration (m/s^2); default zero.
    pub fn gravity(mut self, gravity: [f64; 3]) -> Self {
        self.gravity = gravity;
        self
    }

    /// Time integrator; default backward Euler.
    pub fn integrator(mut self, integrator: Integrator) -> Self {
        self.integrator = integrator;
        self
    }

    /// Nonlinear solver; default `Solver::newton()`.
    pub fn solver(mut self, solver: Solver) -> Self {
        self.solver = solver;
        self
    }

    /// Where the stages run; default `Backend::Cpu`, or `Backend::Gpu` where a device was
    /// given ([`SimulationBuilder::gpu_context`], [`SimulationBuilder::wgpu_device`]).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = Some(backend);
        self
    }

    /// Pins every vertex whose rest position satisfies `predicate` (may be called repeatedly).
    /// `build` refuses a predicate that holds for no vertex: a pin that pins nothing is
    /// almost always a rest position mistyped or a tolerance too tight.
    pub fn pin(mut self, predicate: impl Fn(&[f64; 3]) -> bool + 'static) -> Self {
        self.pins.push(Box::new(predicate));
        self
    }

    /// Adds a static collider.
    pub fn collider(mut self, collider: Collider) -> Self {
        self.colliders.push(collider);
        self
    }

    /// How contact is enforced.
    pub fn contact_model(mut self, model: ContactModel) -> Self {
        self.contact_model = Some(model);
        self
    }

    /// Keeps the tet bodies out of themselves and out of each other: a boundary vertex found
    /// inside a tet (not its own, nor one around its neighbours) is pushed out by the
    /// optimization integrator's penalty `k d sqrt(d + 1e-15)`, `d` its squared distance to the
    /// nearest boundary triangle of the body it is in, about `k depth^3`, with lagged Coulomb
    /// friction between the surfaces. `settings.stiffness` is `k` (N/m^2): a vertex carrying a
    /// weight `W` rests about `sqrt(W / 3k)` deep (1e9 puts a 5 N load 0.04 mm in). It detects
    /// vertices in tets, not crossing edges, and cannot stop a vertex that passes more than
    /// halfway through a part within one step. Newton's solver with PCG only (either backend).
    pub fn self_collision(mut self, settings: crate::SelfCollision) -> Self {
        self.self_collision = Some(settings);
        self
    }

    /// Runs the GPU backend on the application's own device and queue (e.g. its renderer's),
    /// so that positions can be drawn from the device without a readback. Open the device
    /// with [`GpuContext::wanted_features`] so that the stages can use what the adapter has.
    /// (An explicit [`SimulationBuilder::backend`] still decides: `Backend::Cpu` leaves the
    /// device unused.)
    pub fn wgpu_device(mut self, device: wgpu::Device, queue: wgpu::Queue) -> Self {
        self.gpu = Some(Arc::new(GpuContext::from_device(device, queue)));
        self
    }

    /// Runs the GPU backend on a context shared with other simulations: one device per
    /// process (opening a device costs milliseconds, and some drivers misbehave when several
    /// are opened at once). Create it once with [`GpuContext::new`] and clone the `Arc`. (An
    /// explicit [`SimulationBuilder::backend`] still decides, as for `wgpu_device`.)
    pub fn gpu_context(mut self, context: Arc<GpuContext>) -> Self {
        self.gpu = Some(context);
        self
    }

    /// With `true`, a step whose solves end with [`SolveOutcome::BudgetSpent`] or
    /// [`SolveOutcome::Stalled`] is an error and leaves the state unchanged; by default such a
    /// step is taken (its best safe state) and `StepStats::outcome` says so.
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// Adds a damping model (may be called repeatedly to combine models).
    pub fn damping(mut self, damping: Damping) -> Self {
        self.damping.push(damping);
        self
    }

    /// Validates everything and builds the simulation, at rest in the bodies' rest shapes.
    pub fn build(self) -> Result<Simulation> {
        crate::error::require_positive("time step dt", self.dt)?;
        if self.gravity.iter().any(|g| !g.is_finite()) {
            return Err(Error::Parameter(format!("gravity must be finite, got {:?}", self.gravity)));
        }
        self.solver.validate()?;
        self.integrator.validate()?;
        for damping in &self.damping {
            damping.validate()?;
        }
        if self.integrator.explicit().is_some() && !self.damping.is_empty() {
            return Err(Error::Unsupported(
                "damping acts inside implicit solves; use an implicit integrator with damping".into(),
            ));
        }
        if self.bodies.is_empty() {
            return Err(Error::Parameter(
                "the simulation has no bodies; add one with tet_body or spring_body".into(),
            ));
        }
        let mut model = Model::empty(self.gravity);
        for body in &self.bodies {
            match body {
                Body::Tets { mesh, materials, density } => model.add_tet_body(mesh, materials, *density)?,
                Body::Springs(mesh) => model.add_spring_body(mesh)?,
            }
        }
        pin_vertices(&mut model, &self.pins)?;
        for (i, collider) in self.colliders.iter().enumerate() {
            collider.validate(i)?;
        }
        model.colliders = self.colliders;
        match (&self.contact_model, model.colliders.is_empty()) {
            (None, true) => {}
            (None, false) => {
                return Err(Error::Parameter(
                    "colliders need a contact model; add .contact_model(ContactModel::Penalty { stiffness })"
                        .into(),
                ));
            }
            (Some(ContactModel::Penalty { stiffness } | ContactModel::CubicPenalty { stiffness }), _) => {
                crate::error::require_positive("penalty stiffness", *stiffness)?;
            }
            (Some(ContactModel::Barrier { distance, stiffness }), _) => {
                crate::error::require_positive("barrier distance", *distance)?;
                crate::error::require_positive("barrier stiffness", *stiffness)?;
            }
            (Some(ContactModel::Projection), _) => {
                if matches!(
                    self.integrator,
                    Integrator::A1 | Integrator::ASearch { .. } | Integrator::Newmark
                ) {
                    // Their velocities come from the potential's forces (A-1 and A-search's
                    // correction, Newmark's end acceleration), which leave out the colliders'
                    // constraint forces: a projectile's A-search energy jumped between 1 and
                    // 290 J against a 200 J target, and Newmark's on a sphere reached 1e23 J.
                    return Err(Error::Unsupported(format!(
                        "{:?} takes velocities from the potential's forces, which leave out the \
                         projection's constraint forces; use ContactModel::Barrier with it",
                        self.integrator
                    )));
                }
                if let Some(i) =
                    model.colliders.iter().position(|c| matches!(c.shape, crate::contact::Shape::Sdf { .. }))
                {
                    // A sampled distance's normals are approximate: projecting onto them fed
                    // energy in (a cube on a sampled sphere gained hundreds of joules).
                    return Err(Error::Unsupported(format!(
                        "collider {i} is a sampled signed-distance grid; the projection contact model \
                         needs exact distances (plane, sphere, cuboid, capsule): use \
                         ContactModel::Barrier with grids"
                    )));
                }
            }
        }
        if let Some(contact) = self.contact_model {
            model.contact = contact;
        }
        if let Some(floor) = model.contact.floor() {
            let name = model.contact.name();
            if self.integrator.explicit().is_some() {
                return Err(Error::Unsupported(format!(
                    "the {name} contact model needs an implicit integrator (its solve keeps every \
                     step outside the colliders); {:?} is explicit",
                    self.integrator
                )));
            }
            if self.solver.kind() != crate::solver::SolverKind::Newton {
                return Err(Error::Unsupported(format!(
                    "the {name} contact model needs Newton's solver (its line search keeps every step \
                     outside the colliders); use Solver::newton() or ContactModel::Penalty"
                )));
            }
            if let Some((v, i)) =
                crate::contact::first_penetration(&model.colliders, &model.pinned, &model.rest, floor)
            {
                return Err(crate::contact::penetration_error(
                    v,
                    i,
                    &model.rest,
                    "the rest shape puts",
                    name,
                ));
            }
        }
        if let Some(settings) = self.self_collision {
            crate::error::require_positive("self-collision stiffness", settings.stiffness)?;
            if !(settings.friction.is_finite() && settings.friction >= 0.0) {
                return Err(Error::Parameter(format!(
                    "self-collision friction must be finite and not negative, got {}",
                    settings.friction
                )));
            }
            if self.solver.kind() != crate::solver::SolverKind::Newton
                || self.solver.linear == crate::LinearSolver::Cholesky
            {
                // Its Hessian couples vertices of no common element: the product applies it
                // from the contact list, which PCG uses and a factorization cannot.
                return Err(Error::Unsupported(
                    "self-collision needs Newton's solver with PCG (Solver::newton(), the default \
                     linear solver)"
                        .into(),
                ));
            }
            if matches!(self.integrator, Integrator::A1 | Integrator::Newmark | Integrator::ImplicitMidpoint)
            {
                // Stacked cubes under these reached 1e20 J and more at h = 1/30 s: A-1 kicks the
                // vertices in contact with the penalty's full force difference every step, and
                // the trapezoidal pair keeps the stiff contact modes' energy
                // (examples/self_collision_integrators.rs).
                return Err(Error::Unsupported(format!(
                    "{:?} blows up on self-collision's stiff penalty at game steps; use backward \
                     Euler, BDF2, the stabilized integrator, A-search or AVF",
                    self.integrator
                )));
            }
            if model.contact.is_projection() {
                return Err(Error::Unsupported(
                    "self-collision's penalty and the projection contact model's constrained \
                     steps are not combined; use ContactModel::Penalty or Barrier with it"
                        .into(),
                ));
            }
            model.self_collision = Some(crate::contact::self_contact::SelfContact::new(&model, settings));
        }
        if let crate::solver::SolverKind::LocalGlobal { .. } = self.solver.kind() {
            crate::backend::projective::check(&model)?;
            if self.damping.iter().any(|d| matches!(d, Damping::Rayleigh { .. })) {
                return Err(Error::Unsupported(
                    "Rayleigh damping has no projective form for the local/global solver; use \
                     Damping::MomentumPreserving (the stabilizing paper's model) or Damping::Ether"
                        .into(),
                ));
            }
        }
        let keeps_velocity_error =
            matches!(self.integrator, Integrator::Avf | Integrator::ImplicitMidpoint | Integrator::Newmark);
        if self.solver.spend_budget && keeps_velocity_error && model.has_contact() {
            // A budget leaves the solve unconverged, and these integrators carry its error in
            // their velocities; at impacts it grows without bound (a 0.2 m cube dropped 0.5 m
            // onto a penalty floor under a 2 x 40 budget: AVF 47 -> 133 J, three stacked cubes
            // with self-collision 94 -> 1.6e5 J; Newmark reached 2e7 J). A-1 and A-search keep
            // backward Euler's velocity after an unconverged solve instead.
            return Err(Error::Unsupported(format!(
                "{:?} gains energy without bound at impacts when its solves stop at a fixed \
                 budget; with contact use backward Euler, BDF2, the stabilized integrator, A-1 or \
                 A-search with Solver::budget, or converged solves",
                self.integrator
            )));
        }
        let mixed = self.solver.kind() == crate::solver::SolverKind::MixedFem;
        if mixed && self.integrator == Integrator::Avf {
            return Err(Error::Unsupported(
                "the mixed-FEM solver keeps one stretch per tet at one quadrature node; AVF's \
                 objective has two. Use another implicit integrator or Solver::newton()"
                    .into(),
            ));
        }
        let on_gpu = |model: &Model, context: Arc<GpuContext>| -> Result<Box<dyn Stages>, Error> {
            Ok(Box::new(GpuBackend::new(context, Arc::new(model.clone()))?))
        };
        let cpu = |model: &Model| -> Box<dyn Stages> { Box::new(CpuBackend::new(Arc::new(model.clone()))) };
        let chosen = self.backend.unwrap_or(if self.gpu.is_some() { Backend::Gpu } else { Backend::Cpu });
        let (stages, backend): (Box<dyn Stages>, Backend) = match chosen {
            Backend::Cpu => (cpu(&model), Backend::Cpu),
            Backend::Gpu => {
                let context = match self.gpu {
                    Some(context) => context,
                    None => Arc::new(GpuContext::new()?),
                };
                (on_gpu(&model, context)?, Backend::Gpu)
            }
            // Auto: a hardware GPU when there is one and the model fits on it. A software
            // adapter (lavapipe) is correct but no faster than the CPU backend.
            Backend::Auto => {
                let context =
                    self.gpu.or_else(|| GpuContext::new().ok().filter(|c| !c.software).map(Arc::new));
                match context.map(|context| on_gpu(&model, context)) {
                    Some(Ok(stages)) => (stages, Backend::Gpu),
                    _ => (cpu(&model), Backend::Cpu),
                }
            }
        };
        let state = State::at_rest(model.rest.clone());
        let colliders = model.colliders.clone();
        let mut sim = Simulation {
            free_parts: FreeParts::new(&model),
            model: Arc::new(model),
            state,
            previous_theta: 1.0,
            ledger: EnergyLedger::new(0.0, self.integrator.decay()),
            integrator: self.integrator,
            solver: self.solver,
            damping: self.damping,
            stages,
            handles: Vec::new(),
            collider_motion: vec![[0.0; 3]; colliders.len()],
            colliders,
            backend,
            dt: self.dt,
            strict: self.strict,
            time: 0.0,
            energy: EnergyReport::default(),
        };
        sim.refresh_energy();
        sim.ledger.reset(sim.energy.total);
        sim.energy.target = sim.ledger.target();
        Ok(sim)
    }
}

/// Identifies a handle added with [`Simulation::add_handle`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HandleId(pub(crate) usize);

/// A running simulation: model, state, integrator, solver and backend.
pub struct Simulation {
    model: Arc<Model>,
    /// The model's parts no pin holds (the rigid guess's).
    free_parts: FreeParts,
    state: State,
    /// Where the last step balanced its forces (`Outcome::theta`), for the next step's rigid
    /// guess.
    previous_theta: f64,
    ledger: EnergyLedger,
    integrator: Integrator,
    solver: Solver,
    damping: Vec<Damping>,
    stages: Box<dyn Stages>,
    handles: Vec<Anchor>,
    /// The colliders as they are now: the model's, moved by `move_collider`.
    colliders: Vec<crate::Collider>,
    /// How far each collider moved since the last step (the next step's friction is relative
    /// to that motion).
    collider_motion: Vec<[f64; 3]>,
    backend: Backend,
    dt: f64,
    /// Non-converged steps are errors (`SimulationBuilder::strict`).
    strict: bool,
    time: f64,
    energy: EnergyReport,
}

impl Simulation {
    /// A builder with defaults: dt 1/30 s, no gravity, backward Euler, Newton, CPU.
    pub fn builder() -> SimulationBuilder {
        SimulationBuilder {
            bodies: Vec::new(),
            dt: 1.0 / 30.0,
            gravity: [0.0; 3],
            integrator: Integrator::BackwardEuler,
            solver: Solver::newton(),
            backend: None,
            pins: Vec::new(),
            colliders: Vec::new(),
            contact_model: None,
            self_collision: None,
            damping: Vec::new(),
            gpu: None,
            strict: false,
        }
    }

    /// Advances one time step. On error the state is unchanged.
    pub fn step(&mut self) -> Result<StepStats> {
        // A GPU step's host mostly waits for the device: nothing for polling workers to do.
        if self.stages.gpu_context().is_some() {
            return worker_pool().install(|| self.advance());
        }
        worker_pool().install(|| with_workers_awake(|| self.advance()))
    }

    /// Moves collider `index` (in the order they were added) by `translation` (m) before the
    /// next step: a kinematic collider, such as a rising platform or a pushing paddle. The
    /// potential energy the move puts into the bodies (or takes out) is booked in the energy
    /// ledger as user forcing, as a handle's move is. Over the next step, friction acts on the
    /// motion relative to the collider (a platform sliding sideways carries what rests on it),
    /// and the work it does on the bodies is booked as user forcing too.
    pub fn move_collider(&mut self, index: usize, translation: [f64; 3]) -> Result<()> {
        if translation.iter().any(|c| !c.is_finite()) {
            return Err(Error::Parameter(format!(
                "collider translation must be finite, got {translation:?}"
            )));
        }
        let Some(collider) = self.colliders.get(index) else {
            return Err(Error::Parameter(format!(
                "no collider {index}; the simulation has {}",
                self.colliders.len()
            )));
        };
        let moved = collider.translated(translation);
        if let Some(floor) = self.model.contact.floor() {
            let (pinned, positions) = (&self.model.pinned, &self.state.positions);
            if let Some((v, _)) =
                crate::contact::first_penetration(std::slice::from_ref(&moved), pinned, positions, floor)
            {
                let what = format!("moving collider {index} by {translation:?} would put");
                let name = self.model.contact.name();
                return Err(crate::contact::penetration_error(v, index, positions, &what, name));
            }
        }
        self.colliders[index] = moved;
        for (m, t) in self.collider_motion[index].iter_mut().zip(translation) {
            *m += t;
        }
        let before = self.energy.potential;
        self.stages.set_colliders(&self.colliders);
        self.book_user_forcing(before);
        Ok(())
    }

    /// The colliders where they are now (kinematic ones moved by
    /// [`move_collider`](Self::move_collider)).
    pub fn colliders(&self) -> &[crate::Collider] {
        &self.colliders
    }

    fn advance(&mut self) -> Result<StepStats> {
        let started = Instant::now();
        let cpu_started = thread_cpu_time();
        let n = self.model.vertex_count();
        let h = self.dt;
        let mut gradient = vec![[0.0; 3]; n];
        self.stages.potential_gradient(&self.state.positions, &mut gradient);
        let masses = &self.model.masses;
        let acceleration = crate::math::per_vertex(n, |v| gradient[v].map(|g| -g / masses[v]));
        let pressing = self.stages.pressing_forces();
        let damping = LaggedDamping::at_step_start(
            &self.model,
            &self.colliders,
            &self.collider_motion,
            &self.damping,
            &self.state.positions,
            &self.state.velocities,
            h,
            &pressing,
        );
        let device_before = self.stages.device_counts();
        let previous = self.state.previous.as_ref().map(|(x, v)| (x.as_slice(), v.as_slice()));
        let solver = self.solver.for_step(started);
        let mut stepper = Stepper {
            stages: self.stages.as_mut(),
            model: &self.model,
            parts: &self.free_parts,
            solver: &solver,
            input: StepInput {
                dt: h,
                positions: &self.state.positions,
                velocities: &self.state.velocities,
                previous,
                previous_theta: self.previous_theta,
                acceleration: &acceleration,
            },
            damping: &damping,
            start_energy: self.energy,
            report: SolveReport::empty(),
        };
        // Alg. 1 of the A-search paper updates the target first, so that the state after
        // this step aims at target(t_{n+1}). The ledger is only committed once the step is.
        let mut ledger = self.ledger;
        ledger.advance(h);
        let outcome = self.integrator.advance(&mut stepper, ledger.target());
        let mut report = stepper.report;
        if let Some(error) = self.stages.take_error() {
            return Err(error);
        }
        let outcome = outcome?;
        let solve_outcome = match (report.stalled, report.converged, report.round_off) {
            (true, ..) => SolveOutcome::Stalled,
            (false, false, _) => SolveOutcome::BudgetSpent,
            (false, true, true) => SolveOutcome::RoundOff,
            (false, true, false) => SolveOutcome::Converged,
        };
        if self.strict && solve_outcome >= SolveOutcome::BudgetSpent {
            return Err(Error::Solver(format!(
                "the step did not converge ({solve_outcome:?}, |grad G| {:.3e} N after {} Newton iterations); \
                 the state was left unchanged (raise the solver's max_iterations, or leave strict off to \
                 accept the best state)",
                report.gradient_norm, report.iterations
            )));
        }
        let Outcome { x, mut v, alpha, mut dissipated, theta } = outcome;
        for d in &self.damping {
            if let Damping::MomentumPreserving { coefficient } = d {
                let damped = crate::damping::momentum_preserving(&self.model, &x, &v, *coefficient);
                dissipated += kinetic_energy(&self.model, &v) - kinetic_energy(&self.model, &damped);
                v = damped;
            }
        }
        if let Some(bad) = crate::math::first_non_finite(&x).or_else(|| crate::math::first_non_finite(&v)) {
            return Err(Error::Solver(format!(
                "the step produced a non-finite value at vertex {bad} (dt {h} may be too large for {}); \
                 the state was left unchanged",
                self.integrator.name()
            )));
        }
        // Finite positions and velocities can still hold energies beyond f64's range (a
        // stiffness or speed far out of scale): refused like a non-finite state.
        let potential = worker_pool().install(|| self.stages.potential(&x));
        if let Some(error) = self.stages.take_error() {
            return Err(error);
        }
        let kinetic = kinetic_energy(&self.model, &v);
        if !(potential.is_finite() && kinetic.is_finite()) {
            return Err(Error::Solver(format!(
                "the step produced a non-finite energy, beyond f64's range (kinetic {kinetic:e} J, \
                 potential {potential:e} J; dt {h} may be too large for {}); the state was left unchanged",
                self.integrator.name()
            )));
        }
        // The moving colliders' friction worked on the bodies: the application's doing.
        let collider_work = damping.collider_work(&self.state.positions, &x);
        self.collider_motion.fill([0.0; 3]);
        let previous_positions = std::mem::replace(&mut self.state.positions, x);
        let previous_velocities = std::mem::replace(&mut self.state.velocities, v);
        self.state.previous = Some((previous_positions, previous_velocities));
        self.previous_theta = theta;
        self.time += h;
        self.publish_positions();
        ledger.dissipate(dissipated);
        ledger.add(collider_work);
        self.ledger = ledger;
        self.set_energy(kinetic, potential);
        self.energy.target = self.ledger.target();
        let device =
            self.stages.device_counts().zip(device_before).map(|(after, before)| after.since(&before));
        let PhaseTimes { evaluate, linear_solve, local_solve, line_search } = report.times;
        Ok(StepStats {
            iterations: report.iterations,
            linear_iterations: report.linear_iterations,
            projected_iterations: report.projected_iterations,
            resumed_iterations: report.resumed_iterations,
            alpha,
            converged: report.converged,
            round_off: report.round_off,
            outcome: solve_outcome,
            gradient_norm: report.gradient_norm,
            objective_decrease: report.objective_decrease,
            dissipated,
            timings: StepTimings {
                total: started.elapsed(),
                evaluate,
                linear_solve,
                local_solve,
                line_search,
                thread_cpu: cpu_started.zip(thread_cpu_time()).map(|(a, b)| b.saturating_sub(a)),
            },
            device,
            objectives: std::mem::take(&mut report.objectives),
        })
    }

    /// Ties `vertex` to a handle by a spring of `stiffness` (N/m). The handle starts where the
    /// vertex is, so adding it changes no energy; move it with [`move_handle`](Self::move_handle).
    pub fn add_handle(&mut self, vertex: usize, stiffness: f64) -> Result<HandleId> {
        if vertex >= self.model.vertex_count() {
            return Err(Error::Parameter(format!(
                "handle vertex {vertex} is out of range; the simulation has {} vertices",
                self.model.vertex_count()
            )));
        }
        crate::error::require_positive("handle stiffness", stiffness)?;
        let handle = Anchor { vertex: vertex as u32, stiffness, position: self.state.positions[vertex] };
        // A released handle's slot is taken again.
        let slot = match self.handles.iter().position(|h| h.stiffness == 0.0) {
            Some(slot) => {
                self.handles[slot] = handle;
                slot
            }
            None => {
                self.handles.push(handle);
                self.handles.len() - 1
            }
        };
        self.stages.set_anchors(&self.handles);
        Ok(HandleId(slot))
    }

    /// The vertex a handle pulls.
    pub fn handle_vertex(&self, id: HandleId) -> Result<usize> {
        self.handles
            .get(id.0)
            .map(|h| h.vertex as usize)
            .ok_or_else(|| Error::Parameter(format!("no handle {}", id.0)))
    }

    /// Lets go of a handle: its spring stops acting. The energy it held leaves the energy
    /// ledger's books as user forcing, like a move; its id may be given to a later handle.
    pub fn release_handle(&mut self, id: HandleId) -> Result<()> {
        let Some(handle) = self.handles.get_mut(id.0) else {
            return Err(Error::Parameter(format!("no handle {}", id.0)));
        };
        handle.stiffness = 0.0;
        self.book_handle_change();
        Ok(())
    }

    /// Moves a handle. The potential energy this injects (or removes) is booked in the energy
    /// ledger before the next step, as user forcing (stabilizing paper, Alg. 1).
    pub fn move_handle(&mut self, id: HandleId, position: [f64; 3]) -> Result<()> {
        if position.iter().any(|c| !c.is_finite()) {
            return Err(Error::Parameter(format!("handle position must be finite, got {position:?}")));
        }
        let Some(handle) = self.handles.get_mut(id.0) else {
            return Err(Error::Parameter(format!("no handle {}", id.0)));
        };
        handle.position = position;
        self.book_handle_change();
        Ok(())
    }

    /// Hands the changed handles to the backend and books the energy the change put in.
    fn book_handle_change(&mut self) {
        let before = self.energy.potential;
        self.stages.set_anchors(&self.handles);
        self.book_user_forcing(before);
    }

    /// Books the potential energy a change of handles or colliders put in (or took out) since
    /// the potential was `before`, as user forcing (stabilizing paper, Alg. 1).
    fn book_user_forcing(&mut self, before: f64) {
        self.refresh_energy();
        self.ledger.add(self.energy.potential - before);
        self.energy.target = self.ledger.target();
    }

    /// Sets the energy target of the controlled integrators (J), e.g. below the initial energy
    /// to damp spurious start-up motion. Booked additions and losses count from here.
    pub fn set_energy_target(&mut self, target: f64) -> Result<()> {
        if !target.is_finite() {
            return Err(Error::Parameter(format!("energy target must be finite, got {target}")));
        }
        self.ledger.reset(target);
        self.energy.target = target;
        Ok(())
    }

    /// The energy account: initial target, energy added by the user and removed on purpose.
    pub fn ledger(&self) -> &EnergyLedger {
        &self.ledger
    }

    /// Positions of all vertices (m), bodies in the order they were added.
    pub fn positions(&self) -> &[[f64; 3]] {
        &self.state.positions
    }

    /// Velocities of all vertices (m/s).
    pub fn velocities(&self) -> &[[f64; 3]] {
        &self.state.velocities
    }

    /// Replaces positions and velocities (one entry per vertex). Pinned vertices keep their
    /// positions' values as given and are held there with zero velocity. Clears the step
    /// history (BDF2 restarts with backward Euler) and resets the energy target.
    pub fn set_state(&mut self, positions: &[[f64; 3]], velocities: &[[f64; 3]]) -> Result<()> {
        let n = self.model.vertex_count();
        for (name, values) in [("positions", positions), ("velocities", velocities)] {
            if values.len() != n {
                return Err(Error::State(format!(
                    "{name} has {} entries; the simulation has {n} vertices",
                    values.len()
                )));
            }
            if let Some(v) = values.iter().position(|p| p.iter().any(|c| !c.is_finite())) {
                return Err(Error::State(format!("{name} of vertex {v} is not finite: {:?}", values[v])));
            }
        }
        if let Some(floor) = self.model.contact.floor()
            && let Some((v, i)) =
                crate::contact::first_penetration(&self.colliders, &self.model.pinned, positions, floor)
        {
            let name = self.model.contact.name();
            return Err(crate::contact::penetration_error(v, i, positions, "the positions put", name));
        }
        // A state outside a material's domain (an inverted neo-Hookean element) has infinite
        // energy: no step can start from it.
        let potential = worker_pool().install(|| self.stages.potential(positions));
        if let Some(error) = self.stages.take_error() {
            return Err(error);
        }
        if !potential.is_finite() {
            return Err(Error::State(format!(
                "the positions give an infinite potential energy ({potential}): an element outside its \
                 material's domain (an inverted neo-Hookean element?), or energies beyond f64's range; use \
                 stable_neo_hookean or fixed_corotated for states that invert"
            )));
        }
        let velocities: Vec<[f64; 3]> = velocities
            .iter()
            .zip(&self.model.pinned)
            .map(|(v, &pinned)| if pinned { [0.0; 3] } else { *v })
            .collect();
        let kinetic = kinetic_energy(&self.model, &velocities);
        if !kinetic.is_finite() {
            return Err(Error::State(format!(
                "the velocities' kinetic energy is beyond f64's range ({kinetic})"
            )));
        }
        self.state.positions = positions.to_vec();
        self.state.velocities = velocities;
        self.state.previous = None;
        self.publish_positions();
        self.set_energy(kinetic, potential);
        self.ledger.reset(self.energy.total);
        self.energy.target = self.ledger.target();
        Ok(())
    }

    /// Energies of the current state.
    pub fn energy(&self) -> EnergyReport {
        self.energy
    }

    /// Total angular momentum about the centre of mass (kg m^2/s).
    pub fn angular_momentum(&self) -> [f64; 3] {
        let masses = &self.model.masses;
        let total: f64 = masses.iter().sum();
        let center = self
            .state
            .positions
            .iter()
            .zip(masses)
            .fold(DVec3::ZERO, |acc, (x, m)| acc + DVec3::from(*x) * *m)
            / total;
        let l = self
            .state
            .positions
            .iter()
            .zip(&self.state.velocities)
            .zip(masses)
            .fold(DVec3::ZERO, |acc, ((x, v), m)| {
                acc + (DVec3::from(*x) - center).cross(DVec3::from(*v)) * *m
            });
        l.into()
    }

    /// Where the stages run (`Auto` resolved to the backend it chose).
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Simulated time (s).
    pub fn time(&self) -> f64 {
        self.time
    }

    /// Time step (s).
    pub fn dt(&self) -> f64 {
        self.dt
    }

    /// The integrator.
    pub fn integrator(&self) -> &Integrator {
        &self.integrator
    }

    /// The nonlinear solver's settings.
    pub fn solver(&self) -> &Solver {
        &self.solver
    }

    /// The fixed model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The current state.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// The device buffer holding the current positions (3 f32 per vertex, vertex order as in
    /// `positions()`), for drawing without a readback; `None` on the CPU backend.
    pub fn gpu_positions(&self) -> Option<&wgpu::Buffer> {
        self.stages.positions_buffer()
    }

    /// The GPU backend's device context (for `start_profiling` and `pass_times`); `None` on
    /// the CPU.
    pub fn gpu_context(&self) -> Option<&GpuContext> {
        self.stages.gpu_context()
    }

    /// Device memory the GPU backend holds for this simulation (bytes); `None` on the CPU.
    pub fn gpu_memory(&self) -> Option<u64> {
        self.stages.device_memory()
    }

    /// Keeps the GPU's position buffer on the committed state (a blended or explicit step ends
    /// elsewhere than the last Newton iterate).
    fn publish_positions(&mut self) {
        self.stages.publish_positions(&self.state.positions);
    }

    /// Recomputes the energies of the current state (the target is the ledger's business).
    fn refresh_energy(&mut self) {
        let potential = worker_pool().install(|| self.stages.potential(&self.state.positions));
        self.set_energy(kinetic_energy(&self.model, &self.state.velocities), potential);
    }

    /// The energies of the current state, given its kinetic and potential energy.
    fn set_energy(&mut self, kinetic: f64, potential: f64) {
        self.energy =
            EnergyReport { kinetic, potential, total: kinetic + potential, target: self.energy.target };
    }
}

/// A fixed-step driver for a variable frame clock: the application hands it each frame's
/// elapsed time, and it steps the simulation by its fixed `dt` as often as the accumulated
/// time allows — at most `max_substeps` times per frame. Time beyond that is dropped, so a
/// slow frame slows the simulation down instead of queueing ever more steps; what is left
/// below one step is carried to the next frame.
#[derive(Clone, Debug, PartialEq)]
pub struct FixedStep {
    max_substeps: usize,
    accumulated: f64,
}

/// What one frame of a [`FixedStep`] driver did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FrameStats {
    /// The steps taken, in order.
    pub steps: Vec<StepStats>,
    /// Simulated time the substep limit dropped this frame (s).
    pub dropped: f64,
    /// The carried remainder as a fraction of a step, in [0, 1): where between the last two
    /// states the frame's clock lies (for interpolating what is drawn).
    pub remainder: f64,
}

impl FixedStep {
    /// A driver taking at most `max_substeps` steps per frame (at least 1).
    pub fn new(max_substeps: usize) -> Result<FixedStep> {
        if max_substeps == 0 {
            return Err(Error::Parameter("a fixed-step driver needs at least one substep per frame".into()));
        }
        Ok(FixedStep { max_substeps, accumulated: 0.0 })
    }

    /// Advances `sim` by a frame of `elapsed` seconds. A bad `elapsed` (negative or not finite)
    /// is an error that changes nothing; a step's error stops the frame, with the steps before
    /// it kept and the failed step's time still owed.
    pub fn advance(&mut self, sim: &mut Simulation, elapsed: f64) -> Result<FrameStats> {
        if !(elapsed.is_finite() && elapsed >= 0.0) {
            return Err(Error::Parameter(format!(
                "a frame's elapsed time must be finite and not negative, got {elapsed}"
            )));
        }
        let dt = sim.dt();
        self.accumulated += elapsed;
        // A hair of slack, so that frames summing to a whole step in floating point count as one.
        let due = (self.accumulated / dt + 1e-9).floor() as usize;
        let steps = due.min(self.max_substeps);
        let mut frame = FrameStats::default();
        if due > steps {
            frame.dropped = (due - steps) as f64 * dt;
            self.accumulated -= frame.dropped;
        }
        for _ in 0..steps {
            frame.steps.push(sim.step()?);
            self.accumulated -= dt;
        }
        // Round-off can leave a hair below zero.
        self.accumulated = self.accumulated.max(0.0);
        frame.remainder = self.accumulated / dt;
        Ok(frame)
    }
}
