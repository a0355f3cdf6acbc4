//! Mass-spring bodies (cloth, ropes, the papers' single-spring experiments).

use crate::error::{Error, Result};

/// Which energy a spring stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpringKind {
    /// `k/2 (|d| - r)^2`.
    Hooke,
    /// `k/2 (|d|^2 - r^2)^2`: quartic in positions, so AVF conserves it exactly.
    StVK,
}

/// One spring between two vertices of a [`SpringMesh`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spring {
    /// Vertex indices.
    pub ends: [u32; 2],
    /// Rest length (m).
    pub rest: f64,
    /// Stiffness: N/m for Hooke, N/m^3 for StVK.
    pub stiffness: f64,
    /// Energy kind.
    pub kind: SpringKind,
}

/// Point masses joined by springs.
#[derive(Clone, Debug, PartialEq)]
pub struct SpringMesh {
    positions: Vec<[f64; 3]>,
    masses: Vec<f64>,
    springs: Vec<Spring>,
}

impl SpringMesh {
    /// Point masses at `positions` (m) with `masses` (kg), no springs yet.
    pub fn new(positions: Vec<[f64; 3]>, masses: Vec<f64>) -> SpringMesh {
        SpringMesh { positions, masses, springs: Vec::new() }
    }

    /// Adds a spring whose rest length is the current distance of its ends.
    pub fn spring(self, i: u32, j: u32, stiffness: f64, kind: SpringKind) -> SpringMesh {
        let rest = match (self.positions.get(i as usize), self.positions.get(j as usize)) {
            (Some(a), Some(b)) => (glam::DVec3::from(*a) - glam::DVec3::from(*b)).length(),
            // Out-of-range ends are reported by `validate`, with the spring named.
            _ => 0.0,
        };
        self.spring_with_rest(i, j, rest, stiffness, kind)
    }

    /// Adds a spring with an explicit rest length.
    pub fn spring_with_rest(
        mut self,
        i: u32,
        j: u32,
        rest: f64,
        stiffness: f64,
        kind: SpringKind,
    ) -> SpringMesh {
        self.springs.push(Spring { ends: [i, j], rest, stiffness, kind });
        self
    }

    /// A rectangular cloth of `nx` x `ny` quads spanning `size` (m) in the x-y plane, with
    /// stretch springs on the grid edges, shear springs on the diagonals and bending springs
    /// skipping one vertex. Areal density 0.2 kg/m^2; Hooke springs of stiffness 2000, 200 and
    /// 20 N/m (stretch, shear, bend). A count of 0 quads is taken as 1.
    ///
    /// # Panics
    ///
    /// Where [`SpringMesh::try_cloth`] fails: more vertices than `u32` ids can name, or more
    /// than memory holds. Sizes from user input go to `try_cloth`.
    pub fn cloth(nx: usize, ny: usize, size: [f64; 2]) -> SpringMesh {
        SpringMesh::try_cloth(nx, ny, size).unwrap_or_else(|e| panic!("SpringMesh::cloth: {e}"))
    }

    /// [`SpringMesh::cloth`], or an error where its vertices would not fit `u32` ids or its
    /// arrays the memory.
    pub fn try_cloth(nx: usize, ny: usize, size: [f64; 2]) -> Result<SpringMesh> {
        let (nx, ny) = (nx.max(1), ny.max(1));
        let vertices = crate::mesh::grid_vertex_count("cloth", &[nx, ny])?;
        let id = |i: usize, j: usize| (i + (nx + 1) * j) as u32;
        let links: [(isize, isize, f64); 6] =
            [(1, 0, 2000.0), (0, 1, 2000.0), (1, 1, 200.0), (-1, 1, 200.0), (2, 0, 20.0), (0, 2, 20.0)];
        // All reserved before any is filled, so that a refusal comes at once. At most six
        // springs a vertex; no overflow, as vertices <= u32::MAX.
        let springs = crate::mesh::reserve("cloth springs", links.len() * vertices)?;
        let mut positions = crate::mesh::reserve("cloth vertices", vertices)?;
        let mut masses = crate::mesh::reserve("cloth masses", vertices)?;
        for j in 0..=ny {
            for i in 0..=nx {
                positions.push([size[0] * i as f64 / nx as f64, size[1] * j as f64 / ny as f64, 0.0]);
            }
        }
        masses.resize(vertices, 0.2 * size[0] * size[1] / vertices as f64);
        let mut mesh = SpringMesh { positions, masses, springs };
        for j in 0..=ny {
            for i in 0..=nx {
                for (di, dj, k) in links {
                    let (ti, tj) = (i as isize + di, j as isize + dj);
                    if (0..=nx as isize).contains(&ti) && tj <= ny as isize {
                        mesh = mesh.spring(id(i, j), id(ti as usize, tj as usize), k, SpringKind::Hooke);
                    }
                }
            }
        }
        Ok(mesh)
    }

    /// Positions (m).
    pub fn positions(&self) -> &[[f64; 3]] {
        &self.positions
    }

    /// Vertex masses (kg).
    pub fn masses(&self) -> &[f64] {
        &self.masses
    }

    /// The springs.
    pub fn springs(&self) -> &[Spring] {
        &self.springs
    }

    /// Checks sizes, ranges and parameters, naming the first offending vertex or spring.
    pub fn validate(&self) -> Result<()> {
        if self.masses.len() != self.positions.len() {
            return Err(Error::Mesh(format!(
                "spring mesh has {} positions but {} masses; give one mass per vertex",
                self.positions.len(),
                self.masses.len()
            )));
        }
        if let Some(i) = self.positions.iter().position(|p| p.iter().any(|c| !c.is_finite())) {
            return Err(Error::Mesh(format!("spring-mesh vertex {i} has a non-finite coordinate")));
        }
        if let Some(i) = self.masses.iter().position(|m| !(m.is_finite() && *m > 0.0)) {
            return Err(Error::Parameter(format!(
                "spring-mesh vertex {i} has mass {}; masses must be finite and greater than zero",
                self.masses[i]
            )));
        }
        for (s, spring) in self.springs.iter().enumerate() {
            let [i, j] = spring.ends;
            if i as usize >= self.positions.len() || j as usize >= self.positions.len() {
                return Err(Error::Mesh(format!(
                    "spring {s} joins vertices {i} and {j}, but the mesh has {} vertices",
                    self.positions.len()
                )));
            }
            if i == j {
                return Err(Error::Mesh(format!("spring {s} joins vertex {i} to itself")));
            }
            crate::error::require_positive(&format!("stiffness of spring {s}"), spring.stiffness)?;
            if !(spring.rest.is_finite() && spring.rest >= 0.0) {
                return Err(Error::Parameter(format!(
                    "rest length of spring {s} must be finite and not negative, got {}",
                    spring.rest
                )));
            }
        }
        Ok(())
    }
}
