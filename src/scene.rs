//! Scene files: a simulation described in TOML, as `lively run SCENE.toml` reads it.
//!
//! ```toml
//! name = "spinning cube"
//! recreates = "avf-stvk-energy-conserving.md, the spinning cube"
//! dt = 0.0333            # s (default 1/30)
//! steps = 90             # default 90
//! gravity = [0, -9.81, 0]
//! integrator = "avf"     # fe se be bdf2 im newmark avf stabilized a1 a-search
//! solver = "newton"      # or "local-global", "mixed-fem"
//! tolerance = 1e-8       # N (the solver's default without)
//! max_iterations = 50    # Newton or mixed-FEM iterations per step at most (default without)
//! wall_time = 5.0        # ms: Newton or mixed FEM starts no iteration after this
//! linear_solver = "cholesky" # pcg, pcg-projective (default) or cholesky
//!
//! damping = 0.08        # momentum-preserving damping coefficient (none without)
//! out = "out/cube"       # where `lively run` and `compare` write (relative to the scene;
//! frames = "vtk"         # lively-out without) and which frames `run` adds: vtk or obj
//!
//! [body]
//! kind = "bar"           # "bar" (cells, size), "file" (path, relative to the scene),
//!                        # "ball" (radius, target_edge: a stuffed sphere whose bounding box
//!                        # starts at the origin), "cloth" (cells and size in x and y;
//!                        # springs, no material) or "spring" (one StVK spring from the
//!                        # origin to size, with rest_length, stiffness and mass per end)
//! cells = [4, 4, 4]
//! size = [0.5, 0.5, 0.5]
//! material = "stvk"      # stvk corotated fixed-corotated neo-hookean stable-neo-hookean arap
//! youngs = 1e5
//! poisson = 0.3
//! density = 1000
//! copies = 3              # tet bodies only: this many, each `copy_offset` (m) from the last
//! copy_offset = [0.01, 0.21, 0.01]
//!
//! [start]                # about the rest shape's centroid, applied in this order
//! stretch = [1.3, 1, 1]  # scale per axis
//! twist = 1.0            # rad, about x, growing linearly along x
//! velocity = [0, 0, 0]   # m/s
//! spin = [0, 3, 0]       # rad/s
//! random = 0.1           # m: every coordinate moved by a uniform amount in [-0.1, 0.1]
//! seed = 7               # of the random start (default 0)
//!
//! [[region]]             # tets whose rest centroid lies in the region take its material
//! shape = "sphere"       # sphere (center, radius) or box (min, max); a later region wins
//! center = [0.1, 0.1, 0.1]
//! radius = 0.05
//! material = "stable-neo-hookean"
//! youngs = 1e14
//! poisson = 0.45
//!
//! [[pin]]                # pins the vertices whose rest coordinate on `axis` is in [min, max]
//!                        # (a range that holds none is an error), or (near = [x, y, z]) the
//!                        # one vertex nearest that point
//! axis = "x"
//! max = 0.0
//!
//! [[collider]]           # plane (normal, offset), sphere (center, radius),
//! shape = "plane"        # cuboid (center, half_extents), capsule (a, b, radius), or
//!                        # surface (path of a closed .obj/.ply, relative to the scene, and
//!                        # spacing of its signed-distance grid)
//! normal = [0, 1, 0]
//! offset = 0.0
//! friction = 0.3
//!
//! [[handle]]             # the vertex nearest `near` (rest), pulled by a spring of
//! near = [0, 1, 0]       # `stiffness` N/m toward its rest place plus
//! stiffness = 50.0       # amplitude * sin(2 pi frequency t) until `until` s, then let go
//! amplitude = [0, 0, 0.2]
//! frequency = 1.0
//! until = 2.0
//! ```
//!
//! Colliders push back by `contact = "penalty"` (the default, `contact_stiffness` N/m,
//! default 1e5), `"cubic-penalty"` (`ContactModel::CubicPenalty`, `contact_stiffness` in
//! N/m^2), `"barrier"` (`ContactModel::Barrier`: `barrier_distance` m, default 1e-3, and
//! `contact_stiffness`) or `"projection"` (`ContactModel::Projection`). `self_collision = 1e7`
//! keeps the tet bodies out of themselves and each other (`SelfCollision`, that stiffness in
//! N/m^2, with `self_friction`, default 0). An unknown key, a
//! value of the wrong kind or a missing file is an error that names it.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::{Backend, Collider, ContactModel, Integrator, Material, Simulation, Solver, TetMesh};

/// A parsed scene file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scene {
    /// What the scene shows (the file's path when the file does not say).
    #[serde(default)]
    pub name: String,
    /// The paper and figure the scene re-creates, if any.
    #[serde(default)]
    pub recreates: String,
    #[serde(default = "default_dt")]
    pub dt: f64,
    #[serde(default = "default_steps")]
    pub steps: usize,
    #[serde(default)]
    pub gravity: [f64; 3],
    #[serde(default = "default_integrator")]
    pub integrator: String,
    #[serde(default = "default_solver")]
    pub solver: String,
    /// Newton's gradient tolerance (N), or local/global's iterations' global tolerance.
    pub tolerance: Option<f64>,
    /// Local/global iterations per step.
    #[serde(default = "default_iterations")]
    pub iterations: usize,
    /// Newton's iteration budget per step.
    pub max_iterations: Option<usize>,
    /// Newton's wall-clock budget per step (ms).
    pub wall_time: Option<f64>,
    /// The linear solver of Newton's and mixed FEM's systems.
    pub linear_solver: Option<String>,
    /// Regions of the body with their own material.
    #[serde(default)]
    pub region: Vec<Region>,
    #[serde(default)]
    pub backend: Option<String>,
    pub body: Body,
    #[serde(default)]
    pub start: Start,
    #[serde(default)]
    pub pin: Vec<Pin>,
    #[serde(default)]
    pub collider: Vec<ColliderSpec>,
    #[serde(default)]
    pub handle: Vec<HandleSpec>,
    #[serde(default = "default_contact_stiffness")]
    pub contact_stiffness: f64,
    /// `"penalty"` (default), `"cubic-penalty"`, `"barrier"` or `"projection"`.
    pub contact: Option<String>,
    /// The barrier's activation distance (m).
    pub barrier_distance: Option<f64>,
    /// The self-collision penalty's stiffness (N/m^2); none without.
    pub self_collision: Option<f64>,
    /// Coulomb friction between bodies in self-contact.
    #[serde(default)]
    pub self_friction: f64,
    /// Momentum-preserving damping coefficient.
    pub damping: Option<f64>,
    /// The output folder of `lively run` and `compare`, relative to the scene file.
    pub out: Option<PathBuf>,
    /// The frames `lively run` writes: `"vtk"` or `"obj"`.
    pub frames: Option<String>,
    /// The folder relative paths are read from (the scene file's).
    #[serde(skip)]
    pub folder: PathBuf,
}

fn default_dt() -> f64 {
    1.0 / 30.0
}
fn default_steps() -> usize {
    90
}
fn default_integrator() -> String {
    "be".into()
}
fn default_solver() -> String {
    "newton".into()
}
fn default_iterations() -> usize {
    10
}
fn default_contact_stiffness() -> f64 {
    1e5
}

/// The deformable body.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Body {
    /// `"bar"` (a box of `cells` over `size`, from the origin), `"file"` (`path`) or
    /// `"cloth"` (`SpringMesh::cloth` of `cells[0] x cells[1]` over `size[0] x size[1]`).
    pub kind: String,
    pub cells: Option<[usize; 3]>,
    pub size: Option<[f64; 3]>,
    pub path: Option<PathBuf>,
    /// A ball's radius and the spacing of its tetrahedralization.
    pub radius: Option<f64>,
    /// A single spring's rest length (m), stiffness (N/m) and the mass at each end (kg).
    pub rest_length: Option<f64>,
    pub stiffness: Option<f64>,
    pub mass: Option<f64>,
    pub target_edge: Option<f64>,
    pub material: Option<String>,
    pub youngs: Option<f64>,
    pub poisson: Option<f64>,
    #[serde(default = "default_density")]
    pub density: f64,
    /// How many copies of a tet body, each `copy_offset` from the last (default one).
    #[serde(default = "default_copies")]
    pub copies: usize,
    pub copy_offset: Option<[f64; 3]>,
}

fn default_copies() -> usize {
    1
}

fn default_density() -> f64 {
    1000.0
}

/// A part of the body with its own material: the tets whose rest centroid lies inside.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Region {
    /// `"sphere"` (`center`, `radius`) or `"box"` (`min`, `max`).
    pub shape: String,
    pub center: Option<[f64; 3]>,
    pub radius: Option<f64>,
    pub min: Option<[f64; 3]>,
    pub max: Option<[f64; 3]>,
    pub material: String,
    pub youngs: f64,
    pub poisson: f64,
}

impl Region {
    /// Whether `point` lies in the region, or an error naming what is missing.
    fn contains(&self, point: [f64; 3]) -> Result<bool> {
        match (self.shape.as_str(), self.center, self.radius, self.min, self.max) {
            ("sphere", Some(c), Some(r), None, None) => {
                Ok((0..3).map(|k| (point[k] - c[k]).powi(2)).sum::<f64>() <= r * r)
            }
            ("box", None, None, Some(lo), Some(hi)) => {
                Ok((0..3).all(|k| point[k] >= lo[k] && point[k] <= hi[k]))
            }
            _ => Err(Error::Parameter(format!(
                "region: shape {:?} needs center and radius (sphere) or min and max (box), and nothing else",
                self.shape
            ))),
        }
    }
}

/// The initial state, from the rest shape.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Start {
    pub stretch: Option<[f64; 3]>,
    pub twist: Option<f64>,
    pub velocity: Option<[f64; 3]>,
    pub spin: Option<[f64; 3]>,
    pub random: Option<f64>,
    #[serde(default)]
    pub seed: u64,
}

/// A vertex moved by the scene: a spring of `stiffness` ties the vertex nearest `near` (at
/// rest) to a point that swings about its rest place by `amplitude * sin(2 pi frequency t)`,
/// until `until` seconds, when it lets go (the energy the user put in stays booked).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandleSpec {
    pub near: [f64; 3],
    pub stiffness: f64,
    #[serde(default)]
    pub amplitude: [f64; 3],
    #[serde(default)]
    pub frequency: f64,
    #[serde(default = "positive_infinity")]
    pub until: f64,
}

/// Pins the vertices whose rest coordinate on `axis` lies in `[min, max]`, or the one vertex
/// nearest `near` at rest.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pin {
    pub axis: Option<String>,
    pub near: Option<[f64; 3]>,
    #[serde(default = "negative_infinity")]
    pub min: f64,
    #[serde(default = "positive_infinity")]
    pub max: f64,
}

fn negative_infinity() -> f64 {
    f64::NEG_INFINITY
}
fn positive_infinity() -> f64 {
    f64::INFINITY
}

/// A static collider.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "shape", rename_all = "lowercase", deny_unknown_fields)]
pub enum ColliderSpec {
    Plane {
        normal: [f64; 3],
        offset: f64,
        #[serde(default)]
        friction: f64,
    },
    Sphere {
        center: [f64; 3],
        radius: f64,
        #[serde(default)]
        friction: f64,
    },
    Cuboid {
        center: [f64; 3],
        half_extents: [f64; 3],
        #[serde(default)]
        friction: f64,
    },
    Capsule {
        a: [f64; 3],
        b: [f64; 3],
        radius: f64,
        #[serde(default)]
        friction: f64,
    },
    /// A closed surface file, sampled into a signed-distance grid every `spacing`.
    Surface {
        path: PathBuf,
        spacing: f64,
        #[serde(default)]
        friction: f64,
    },
}

/// The integrator of a command-line or scene name, with the crate's default parameters for
/// the energy-controlled schemes (stabilized epsilon 0.01, A-search alpha in [0, 1.1]).
pub fn integrator(name: &str) -> Result<Integrator> {
    Integrator::ALL.iter().find(|integrator| integrator.name() == name).cloned().ok_or_else(|| {
        let names: Vec<&str> = Integrator::ALL.iter().map(Integrator::name).collect();
        Error::Parameter(format!("unknown integrator {name:?}; use one of {}", names.join(", ")))
    })
}

/// The backend of a command-line or scene name.
pub fn backend(name: &str) -> Result<Backend> {
    match name {
        "cpu" => Ok(Backend::Cpu),
        "gpu" => Ok(Backend::Gpu),
        "auto" => Ok(Backend::Auto),
        other => Err(Error::Parameter(format!("unknown backend {other:?}; use cpu, gpu or auto"))),
    }
}

impl Scene {
    /// Reads and checks a scene file.
    pub fn load(path: impl AsRef<Path>) -> Result<Scene> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Parameter(format!("cannot read scene {}: {e}", path.display())))?;
        let mut scene = Scene::parse(&text).map_err(|e| match e {
            Error::Parameter(m) => Error::Parameter(format!("scene {}: {m}", path.display())),
            other => other,
        })?;
        scene.folder = path.parent().map(Path::to_path_buf).unwrap_or_default();
        if scene.name.is_empty() {
            scene.name = path.display().to_string();
        }
        Ok(scene)
    }

    /// Parses and checks a scene from TOML text (relative paths from the working folder).
    pub fn parse(text: &str) -> Result<Scene> {
        let scene: Scene = toml::from_str(text).map_err(|e| {
            // toml's message names the key or value; say on which line, in one line.
            let line = e.span().map_or(String::new(), |span| {
                let number = text[..span.start.min(text.len())].matches('\n').count();
                format!("line {} (`{}`): ", number + 1, text.lines().nth(number).unwrap_or("").trim())
            });
            Error::Parameter(format!("{line}{}", e.message().trim()))
        })?;
        integrator(&scene.integrator)?;
        if let Some(name) = &scene.backend {
            backend(name)?;
        }
        if !matches!(scene.body.kind.as_str(), "cloth" | "spring") {
            scene.material()?;
        } else if !scene.region.is_empty() {
            return Err(Error::Parameter(format!(
                "region: a {} has no tets to give materials",
                scene.body.kind
            )));
        }
        scene.solver_settings()?;
        for region in &scene.region {
            material(&region.material, region.youngs, region.poisson, "region.material")?
                .lame_parameters()?;
            region.contains([0.0; 3])?;
        }
        for pin in &scene.pin {
            match (&pin.axis, pin.near) {
                (Some(name), None) => {
                    axis(name)?;
                    if !(pin.min <= pin.max) {
                        return Err(Error::Parameter(format!(
                            "pin: min {} and max {} must be numbers with min <= max",
                            pin.min, pin.max
                        )));
                    }
                }
                (None, Some(_)) => {}
                _ => return Err(Error::Parameter("pin: give either axis (with min, max) or near".into())),
            }
        }
        if let Some(random) = scene.start.random
            && !(random.is_finite() && random >= 0.0)
        {
            return Err(Error::Parameter(format!(
                "start.random must be a finite displacement (m) of at least 0, got {random}"
            )));
        }
        for handle in &scene.handle {
            let mut numbers = handle.near.iter().chain(&handle.amplitude).chain([&handle.frequency]);
            if numbers.any(|c| !c.is_finite()) || handle.until.is_nan() {
                return Err(Error::Parameter(format!(
                    "handle: near {:?}, amplitude {:?} and frequency {} must be finite, and until \
                     ({}) a number",
                    handle.near, handle.amplitude, handle.frequency, handle.until
                )));
            }
        }
        Ok(scene)
    }

    fn material(&self) -> Result<Material> {
        let (Some(name), Some(e), Some(nu)) = (&self.body.material, self.body.youngs, self.body.poisson)
        else {
            return Err(Error::Parameter("body: a tet body needs material, youngs and poisson".into()));
        };
        material(name, e, nu, "body.material")
    }

    /// The material of every tet of `mesh`: the body's, or the last region's that holds the
    /// tet's rest centroid.
    fn tet_materials(&self, mesh: &TetMesh) -> Result<Vec<Material>> {
        let body = self.material()?;
        let regions: Vec<Material> = self
            .region
            .iter()
            .map(|r| material(&r.material, r.youngs, r.poisson, "region.material"))
            .collect::<Result<_>>()?;
        mesh.tets()
            .iter()
            .map(|tet| {
                let centroid = std::array::from_fn(|c| {
                    tet.iter().map(|&v| mesh.positions()[v as usize][c]).sum::<f64>() / 4.0
                });
                let mut chosen = &body;
                for (region, material) in self.region.iter().zip(&regions) {
                    if region.contains(centroid)? {
                        chosen = material;
                    }
                }
                Ok(chosen.clone())
            })
            .collect()
    }
}

/// The material of a scene name, or an error naming `key`.
fn material(name: &str, e: f64, nu: f64, key: &str) -> Result<Material> {
    Ok(match name {
        "stvk" => Material::stvk(e, nu),
        "corotated" => Material::corotated(e, nu),
        "fixed-corotated" => Material::fixed_corotated(e, nu),
        "neo-hookean" => Material::neo_hookean(e, nu),
        "stable-neo-hookean" => Material::stable_neo_hookean(e, nu),
        "arap" => Material::arap(e, nu),
        other => {
            return Err(Error::Parameter(format!(
                "{key}: unknown material {other:?}; use stvk, corotated, fixed-corotated, neo-hookean, \
                 stable-neo-hookean or arap"
            )));
        }
    })
}

impl Scene {
    /// The solver the scene names, with its settings.
    fn solver_settings(&self) -> Result<Solver> {
        let solver = match self.solver.as_str() {
            "newton" | "mixed-fem" => {
                let mut solver = if self.solver == "newton" { Solver::newton() } else { Solver::mixed_fem() };
                if let Some(t) = self.tolerance {
                    solver = solver.tolerance(t);
                }
                if let Some(n) = self.max_iterations {
                    solver = solver.max_iterations(n);
                }
                if let Some(ms) = self.wall_time {
                    if !(ms.is_finite() && ms > 0.0) {
                        return Err(Error::Parameter(format!("wall_time: {ms} ms must be positive")));
                    }
                    solver = solver.wall_time(std::time::Duration::from_secs_f64(ms / 1e3));
                }
                solver
            }
            "local-global" => Solver::local_global(self.iterations),
            other => {
                return Err(Error::Parameter(format!(
                    "solver: unknown solver {other:?}; use newton, local-global or mixed-fem"
                )));
            }
        };
        Ok(match self.linear_solver.as_deref() {
            None => solver,
            Some("pcg") => solver.linear_solver(crate::LinearSolver::Pcg),
            Some("pcg-projective") => solver.linear_solver(crate::LinearSolver::PcgProjective),
            Some("cholesky") => solver.linear_solver(crate::LinearSolver::Cholesky),
            Some(other) => {
                return Err(Error::Parameter(format!(
                    "linear_solver: unknown linear solver {other:?}; use pcg, pcg-projective or cholesky"
                )));
            }
        })
    }

    /// A spring body's springs, or `None` for a tet body: a cloth, or one StVK spring from the
    /// origin to `size` (its start) with `rest_length`, `stiffness` and a `mass` at each end.
    fn spring_body(&self) -> Result<Option<crate::SpringMesh>> {
        let body = &self.body;
        if !matches!(body.kind.as_str(), "cloth" | "spring") {
            return Ok(None);
        }
        if body.copies != 1 {
            return Err(Error::Parameter(format!("body: copies are for tet bodies, not a {}", body.kind)));
        }
        if body.material.is_some() || body.youngs.is_some() || body.poisson.is_some() {
            return Err(Error::Parameter(format!(
                "body: a {} takes no material (its springs have their own stiffness)",
                body.kind
            )));
        }
        let Some(size) = body.size else {
            return Err(Error::Parameter(format!("body: kind {:?} needs size", body.kind)));
        };
        if body.kind == "cloth" {
            let Some(cells) = body.cells else {
                return Err(Error::Parameter("body: kind \"cloth\" needs cells and size".into()));
            };
            return crate::SpringMesh::try_cloth(cells[0], cells[1], [size[0], size[1]]).map(Some);
        }
        let (Some(rest_length), Some(stiffness), Some(mass)) = (body.rest_length, body.stiffness, body.mass)
        else {
            return Err(Error::Parameter(
                "body: kind \"spring\" needs size, rest_length, stiffness and mass".into(),
            ));
        };
        let springs = crate::SpringMesh::new(vec![[0.0; 3], size], vec![mass, mass]).spring_with_rest(
            0,
            1,
            rest_length,
            stiffness,
            crate::SpringKind::StVK,
        );
        springs.validate()?;
        Ok(Some(springs))
    }

    /// The body's mesh at rest.
    pub fn mesh(&self) -> Result<TetMesh> {
        let body = &self.body;
        match body.kind.as_str() {
            "bar" => {
                let (Some(cells), Some(size)) = (body.cells, body.size) else {
                    return Err(Error::Parameter("body: kind \"bar\" needs cells and size".into()));
                };
                if cells.contains(&0) || size.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
                    return Err(Error::Parameter(format!(
                        "body: cells {cells:?} and size {size:?} must be positive"
                    )));
                }
                TetMesh::try_bar(cells, size)
            }
            "file" => {
                let Some(path) = &body.path else {
                    return Err(Error::Parameter("body: kind \"file\" needs path".into()));
                };
                TetMesh::load(self.folder.join(path))
            }
            "ball" => {
                let (Some(radius), Some(edge)) = (body.radius, body.target_edge) else {
                    return Err(Error::Parameter("body: kind \"ball\" needs radius and target_edge".into()));
                };
                TetMesh::from_surface(&crate::TriMesh::sphere([radius; 3], radius, 5)?, edge)
            }
            other => Err(Error::Parameter(format!(
                "body.kind: {other:?} is not a tet body; use \"bar\", \"file\" or \"ball\" (or \"cloth\")"
            ))),
        }
    }

    /// The scene's simulation, in its initial state; `integrator`, `backend` and `solver`
    /// override the file's when given (the command line's options).
    pub fn build(&self, integrator_name: Option<&str>, backend_name: Option<&str>) -> Result<Simulation> {
        self.build_on(integrator_name, backend_name, None)
    }

    /// [`Scene::build`], running a GPU backend on `context` when given (the viewer's device,
    /// so that it draws the simulation's position buffer in place).
    pub fn build_on(
        &self,
        integrator_name: Option<&str>,
        backend_name: Option<&str>,
        context: Option<std::sync::Arc<crate::backend::gpu::GpuContext>>,
    ) -> Result<Simulation> {
        let mut builder = Simulation::builder();
        if let Some(context) = context {
            builder = builder.gpu_context(context);
        }
        let (mut builder, rest) = if let Some(springs) = self.spring_body()? {
            let rest = springs.positions().to_vec();
            (builder.spring_body(springs), rest)
        } else {
            let mesh = self.mesh()?;
            let offset = match (self.body.copies, self.body.copy_offset) {
                (0, _) => return Err(Error::Parameter("body.copies: at least 1".into())),
                (1, _) => [0.0; 3],
                (_, Some(offset)) => offset,
                (_, None) => return Err(Error::Parameter("body: copies needs copy_offset".into())),
            };
            let mut builder = builder;
            let vertices =
                mesh.vertex_count().checked_mul(self.body.copies).filter(|&n| n <= u32::MAX as usize);
            let Some(vertices) = vertices else {
                return Err(Error::Parameter(format!(
                    "body.copies: {} copies of {} vertices are more than the {} that vertex ids (u32) \
                     can name",
                    self.body.copies,
                    mesh.vertex_count(),
                    u32::MAX
                )));
            };
            let mut rest = crate::mesh::reserve("body copies' vertices", vertices)?;
            for k in 0..self.body.copies {
                let shift = offset.map(|c| c * k as f64);
                let positions =
                    mesh.positions().iter().map(|p| std::array::from_fn(|i| p[i] + shift[i])).collect();
                let copy = TetMesh::new(positions, mesh.tets().to_vec())?;
                rest.extend_from_slice(copy.positions());
                let materials = self.tet_materials(&copy)?;
                builder = builder.tet_body_per_tet(copy, materials, self.body.density);
            }
            (builder, rest)
        };
        if let Some(stiffness) = self.self_collision {
            builder =
                builder.self_collision(crate::SelfCollision { stiffness, friction: self.self_friction });
        }
        let solver = self.solver_settings()?;
        let mut builder = builder
            .dt(self.dt)
            .gravity(self.gravity)
            .integrator(integrator(integrator_name.unwrap_or(&self.integrator))?)
            .solver(solver);
        // A scene runs on the CPU unless it or the command line names another backend, even
        // where a device is given (the viewer's).
        let name = backend_name.or(self.backend.as_deref());
        builder = builder.backend(name.map(backend).transpose()?.unwrap_or(Backend::Cpu));
        for pin in &self.pin {
            builder = match (&pin.axis, pin.near) {
                (Some(name), _) => {
                    let (k, min, max) = (axis(name)?, pin.min, pin.max);
                    if !rest.iter().any(|p| p[k] >= min && p[k] <= max) {
                        let (low, high) =
                            rest.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
                                (lo.min(p[k]), hi.max(p[k]))
                            });
                        return Err(Error::Parameter(format!(
                            "pin: no vertex has {name} in [{min}, {max}]; the body's {name} runs \
                             from {low} to {high} at rest"
                        )));
                    }
                    builder.pin(move |p| p[k] >= min && p[k] <= max)
                }
                (None, Some(near)) => {
                    let distance = |p: &[f64; 3]| (0..3).map(|k| (p[k] - near[k]).powi(2)).sum::<f64>();
                    let nearest =
                        *rest.iter().min_by(|a, b| distance(a).total_cmp(&distance(b))).expect("vertices");
                    builder.pin(move |p| *p == nearest)
                }
                (None, None) => return Err(Error::Parameter("pin: give either axis or near".into())),
            };
        }
        for spec in &self.collider {
            builder = builder.collider(match spec.clone() {
                ColliderSpec::Plane { normal, offset, friction } => {
                    Collider::plane(normal, offset).friction(friction)
                }
                ColliderSpec::Sphere { center, radius, friction } => {
                    Collider::sphere(center, radius).friction(friction)
                }
                ColliderSpec::Cuboid { center, half_extents, friction } => {
                    Collider::cuboid(center, half_extents).friction(friction)
                }
                ColliderSpec::Capsule { a, b, radius, friction } => {
                    Collider::capsule(a, b, radius).friction(friction)
                }
                ColliderSpec::Surface { path, spacing, friction } => {
                    let surface = crate::TriMesh::load(self.folder.join(path))?;
                    // Two cells of margin: the grid extends past the surface for contact.
                    let grid = crate::SignedDistanceGrid::from_surface(&surface, spacing, 2.0 * spacing)?;
                    Collider::sdf(grid).friction(friction)
                }
            });
        }
        if !self.collider.is_empty() {
            let stiffness = self.contact_stiffness;
            builder = builder.contact_model(match self.contact.as_deref().unwrap_or("penalty") {
                "penalty" => ContactModel::Penalty { stiffness },
                "cubic-penalty" => ContactModel::CubicPenalty { stiffness },
                "barrier" => {
                    ContactModel::Barrier { distance: self.barrier_distance.unwrap_or(1e-3), stiffness }
                }
                "projection" => ContactModel::Projection,
                other => {
                    return Err(Error::Parameter(format!(
                        "contact = {other:?}: use \"penalty\", \"cubic-penalty\", \"barrier\" or \"projection\""
                    )));
                }
            });
        }
        if let Some(coefficient) = self.damping {
            builder = builder.damping(crate::Damping::MomentumPreserving { coefficient });
        }
        let mut sim = builder.build()?;
        let (x, v) = self.start.state(&rest, sim.positions().len());
        if self.start.changes_anything() {
            sim.set_state(&x, &v)?;
        }
        // The scene's handles come first, so `step` finds them as handles 0, 1, ...
        for (k, handle) in self.handle.iter().enumerate() {
            let distance = |p: &[f64; 3]| (0..3).map(|c| (p[c] - handle.near[c]).powi(2)).sum::<f64>();
            let nearest = (0..rest.len()).min_by(|&a, &b| distance(&rest[a]).total_cmp(&distance(&rest[b])));
            let vertex =
                nearest.ok_or_else(|| Error::Parameter("handle: the body has no vertices".into()))?;
            let id = sim
                .add_handle(vertex, handle.stiffness)
                .map_err(|e| Error::Parameter(format!("handle {k}: {e}")))?;
            debug_assert_eq!(id, crate::HandleId(k));
            sim.move_handle(id, rest[vertex])?;
        }
        Ok(sim)
    }

    /// One step of a simulation this scene built: its handles move to where they are at the
    /// end of the step (or let go), then the simulation steps.
    pub fn step(&self, sim: &mut Simulation) -> Result<crate::StepStats> {
        let t = sim.time() + sim.dt();
        for (k, handle) in self.handle.iter().enumerate() {
            let id = crate::HandleId(k);
            if t <= handle.until {
                let vertex = sim.handle_vertex(id)?;
                let rest = sim.model().rest_positions()[vertex];
                let swing = (2.0 * std::f64::consts::PI * handle.frequency * t).sin();
                sim.move_handle(id, std::array::from_fn(|c| rest[c] + handle.amplitude[c] * swing))?;
            } else if t - sim.dt() <= handle.until {
                sim.release_handle(id)?;
            }
        }
        sim.step()
    }
}

fn axis(name: &str) -> Result<usize> {
    match name {
        "x" => Ok(0),
        "y" => Ok(1),
        "z" => Ok(2),
        other => Err(Error::Parameter(format!("pin.axis: unknown axis {other:?}; use x, y or z"))),
    }
}

impl Start {
    fn changes_anything(&self) -> bool {
        self.stretch.is_some()
            || self.twist.is_some()
            || self.velocity.is_some()
            || self.spin.is_some()
            || self.random.is_some()
    }

    /// Positions and velocities from the rest positions: stretched and twisted about the
    /// centroid, displaced at random, then moving with `velocity` and spinning with `spin`
    /// about the centroid.
    fn state(&self, rest: &[[f64; 3]], n: usize) -> (Vec<[f64; 3]>, Vec<[f64; 3]>) {
        use glam::{DMat3, DVec3};
        let centroid = rest.iter().fold(DVec3::ZERO, |s, p| s + DVec3::from(*p)) / rest.len().max(1) as f64;
        let (low, high) =
            rest.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| (l.min(p[0]), h.max(p[0])));
        let length = (high - low).max(f64::MIN_POSITIVE);
        let stretch = DVec3::from(self.stretch.unwrap_or([1.0; 3]));
        let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(self.seed);
        let amplitude = self.random.unwrap_or(0.0);
        let x: Vec<[f64; 3]> = rest
            .iter()
            .map(|p| {
                let d = (DVec3::from(*p) - centroid) * stretch;
                let angle = self.twist.unwrap_or(0.0) * ((p[0] - low) / length - 0.5);
                let jitter = DVec3::from_array(std::array::from_fn(|_| {
                    if amplitude > 0.0 {
                        rand::RngExt::random_range(&mut rng, -amplitude..amplitude)
                    } else {
                        0.0
                    }
                }));
                (centroid + DMat3::from_rotation_x(angle) * d + jitter).into()
            })
            .collect();
        let spin = DVec3::from(self.spin.unwrap_or([0.0; 3]));
        let velocity = DVec3::from(self.velocity.unwrap_or([0.0; 3]));
        let v = x.iter().map(|p| (velocity + spin.cross(DVec3::from(*p) - centroid)).into()).collect();
        debug_assert_eq!(x.len(), n);
        (x, v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "[body]\nkind = \"bar\"\ncells = [2, 1, 1]\nsize = [0.2, 0.1, 0.1]\nmaterial = \"stvk\"\nyoungs = 1e5\npoisson = 0.3\n";

    #[test]
    fn a_minimal_scene_builds_with_the_defaults() {
        let scene = Scene::parse(MINIMAL).unwrap();
        assert_eq!((scene.steps, scene.integrator.as_str(), scene.dt), (90, "be", 1.0 / 30.0));
        let mut sim = scene.build(None, Some("cpu")).unwrap();
        sim.step().unwrap();
    }

    /// A Newton budget in the file caps the step: one iteration from a stretched start, then
    /// the budget's best.
    #[test]
    fn a_scene_budget_caps_newton() {
        let text = format!("max_iterations = 1\n{MINIMAL}[start]\nstretch = [1.3, 1, 1]\n");
        let mut sim = Scene::parse(&text).unwrap().build(None, Some("cpu")).unwrap();
        let stats = sim.step().unwrap();
        assert_eq!((stats.iterations, stats.outcome), (1, crate::SolveOutcome::BudgetSpent));
        let bad = format!("wall_time = -2.0\n{MINIMAL}");
        let error = Scene::parse(&bad).expect_err("a negative wall time was accepted");
        assert!(error.to_string().contains("wall_time"), "{error}");
    }

    /// Every kind of bad input is one error line that names the culprit.
    #[test]
    fn bad_scenes_are_rejected_with_the_key_or_value_named() {
        let cases = [
            (format!("{MINIMAL}colour = 3\n"), "colour"),
            (MINIMAL.replace("youngs = 1e5", "youngs = \"stiff\""), "youngs"),
            (MINIMAL.replace("stvk", "jelly"), "jelly"),
            (format!("integrator = \"rk4\"\n{MINIMAL}"), "rk4"),
            (format!("{MINIMAL}[[pin]]\naxis = \"w\"\n"), "\"w\""),
            (format!("{MINIMAL}[[collider]]\nshape = \"torus\"\n"), "torus"),
            (format!("{MINIMAL}[start]\nspin = [1, 2]\n"), "spin"),
            (
                format!(
                    "{MINIMAL}[[region]]\nshape = \"box\"\nradius = 1.0\nmaterial = \"stvk\"\nyoungs = 1e6\npoisson = 0.3\n"
                ),
                "min and max",
            ),
            (
                format!(
                    "{MINIMAL}[[region]]\nshape = \"sphere\"\ncenter = [0, 0, 0]\nradius = 1.0\nmaterial = \"gum\"\nyoungs = 1e6\npoisson = 0.3\n"
                ),
                "gum",
            ),
            (format!("{MINIMAL}[[pin]]\naxis = \"x\"\nnear = [0, 0, 0]\n"), "either axis"),
            (format!("solver = \"sqp\"\n{MINIMAL}"), "sqp"),
            (format!("{MINIMAL}[[pin]]\naxis = \"x\"\nmin = 1.0\nmax = 0.0\n"), "min <= max"),
            (
                format!("{MINIMAL}[[handle]]\nnear = [0, 0, 0]\nstiffness = 1e3\nfrequency = nan\n"),
                "frequency",
            ),
            (format!("{MINIMAL}[start]\nrandom = inf\n"), "start.random"),
            (format!("{MINIMAL}[start]\nrandom = -0.1\n"), "start.random"),
        ];
        for (text, named) in cases {
            let message = Scene::parse(&text).unwrap_err().to_string();
            assert!(message.contains(named), "{named:?} not named in: {message}");
            assert!(!message.contains('\n'), "not one line: {message}");
        }
        let message = Scene::load("no/such/scene.toml").unwrap_err().to_string();
        assert!(message.contains("no/such/scene.toml"), "{message}");
        let negative = MINIMAL.replace("youngs = 1e5", "youngs = -1e5");
        let Err(error) = Scene::parse(&negative).unwrap().build(None, Some("cpu")) else {
            panic!("a negative Young's modulus was accepted");
        };
        let message = error.to_string();
        assert!(message.to_lowercase().contains("young"), "{message}");
        // Found when the file is built: a pin that holds no vertex, and generated bodies
        // beyond the u32 vertex ids (refused, not wrapped; `mesh::tests` has beyond memory).
        let cloth = "[body]\nkind = \"cloth\"\ncells = [100000, 100000, 0]\nsize = [1.0, 1.0, 0.0]\n";
        let cases = [
            (format!("{MINIMAL}[[pin]]\naxis = \"x\"\nmin = 0.5\nmax = 0.6\n"), "runs from 0 to 0.2"),
            (MINIMAL.replace("[2, 1, 1]", "[3000, 3000, 3000]"), "vertex ids"),
            (cloth.to_string(), "vertex ids"),
            (format!("{MINIMAL}copies = 1000000000\ncopy_offset = [0.3, 0, 0]\n"), "body.copies"),
        ];
        for (text, named) in cases {
            let Err(error) = Scene::parse(&text).unwrap().build(None, Some("cpu")) else {
                panic!("accepted: {text}");
            };
            let message = error.to_string();
            assert!(message.contains(named), "{named:?} not named in: {message}");
        }
    }

    /// A random start is the seed's: the same seed, the same state; another, another. Every
    /// coordinate moves by at most the amplitude.
    #[test]
    fn a_random_start_is_reproducible_from_its_seed() {
        let state = |seed: u64| {
            let text = format!("{MINIMAL}[start]\nrandom = 0.01\nseed = {seed}\n");
            Scene::parse(&text).unwrap().build(None, Some("cpu")).unwrap().positions().to_vec()
        };
        let rest = Scene::parse(MINIMAL).unwrap().build(None, Some("cpu")).unwrap().positions().to_vec();
        let (a, b, c) = (state(1), state(1), state(2));
        assert_eq!(a, b);
        assert_ne!(a, c);
        let moved = a.iter().flatten().zip(rest.iter().flatten()).map(|(x, r)| (x - r).abs());
        assert!(moved.clone().all(|d| d <= 0.01) && moved.fold(0.0, f64::max) > 0.005);
    }

    /// Regions give the tets whose rest centroid they hold their material; a pin `near` a
    /// point pins one vertex; the mixed-FEM solver and a linear solver are named.
    #[test]
    fn regions_pins_near_a_point_and_the_mixed_solver() {
        let text = format!(
            "solver = \"mixed-fem\"\nlinear_solver = \"cholesky\"\n{MINIMAL}[[region]]\nshape = \"box\"\n\
             min = [0, 0, 0]\nmax = [0.1, 0.1, 0.1]\nmaterial = \"corotated\"\nyoungs = 1e7\npoisson = 0.3\n\
             [[pin]]\nnear = [0.21, 0.1, 0.1]\n"
        );
        let scene = Scene::parse(&text).unwrap();
        let sim = scene.build(None, Some("cpu")).unwrap();
        assert_eq!(sim.solver().kind(), crate::solver::SolverKind::MixedFem);
        let model = sim.model();
        let stiff = crate::Material::corotated(1e7, 0.3).elastic().unwrap();
        for (tet, material) in model.tets.iter().zip(&model.tet_material) {
            let centroid_x = tet.iter().map(|&v| model.rest[v as usize][0]).sum::<f64>() / 4.0;
            assert_eq!(*material == stiff, centroid_x <= 0.1, "tet at x = {centroid_x}");
        }
        let pinned: Vec<usize> = (0..model.vertex_count()).filter(|&v| model.pinned[v]).collect();
        assert_eq!(pinned.len(), 1);
        assert_eq!(model.rest[pinned[0]], [0.2, 0.1, 0.1]);
    }

    /// A cloth is a spring body: it steps, and a material given to it is refused.
    #[test]
    fn a_cloth_scene_takes_no_material() {
        let cloth = "[body]\nkind = \"cloth\"\ncells = [4, 4, 0]\nsize = [1.0, 1.0, 0.0]\n";
        let mut sim = Scene::parse(cloth).unwrap().build(None, Some("cpu")).unwrap();
        assert_eq!(sim.positions().len(), 25);
        sim.step().unwrap();
        let with_material = format!("{cloth}material = \"stvk\"\nyoungs = 1e5\npoisson = 0.3\n");
        let Err(error) = Scene::parse(&with_material).unwrap().build(None, Some("cpu")) else {
            panic!("a cloth with a material was accepted");
        };
        assert!(error.to_string().contains("cloth takes no material"), "{error}");
    }

    /// The initial state: a spin about the centroid gives the rigid velocity field, a stretch
    /// scales about the centroid.
    #[test]
    fn the_start_stretches_and_spins_about_the_centroid() {
        let text = format!("{MINIMAL}[start]\nstretch = [2, 1, 1]\nspin = [0, 0, 3]\n");
        let sim = Scene::parse(&text).unwrap().build(None, Some("cpu")).unwrap();
        let xs: Vec<f64> = sim.positions().iter().map(|p| p[0]).collect();
        let (low, high) =
            xs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), x| (l.min(*x), h.max(*x)));
        assert!((high - low - 0.4).abs() < 1e-12 && (low + 0.1).abs() < 1e-12, "x spans {low}..{high}");
        for (p, v) in sim.positions().iter().zip(sim.velocities()) {
            let r = [p[0] - 0.1, p[1] - 0.05];
            assert!((v[0] + 3.0 * r[1]).abs() < 1e-12 && (v[1] - 3.0 * r[0]).abs() < 1e-12);
        }
    }
}
