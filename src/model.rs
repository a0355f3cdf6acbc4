//! `Model`: everything that stays fixed during a run — rest shape, masses, materials, pins.

use crate::contact::Collider;
use crate::error::{Error, Result};
use crate::material::{Elastic, Material, SpringLaw};
use crate::mesh::{SpringMesh, TetMesh, signed_volume};

/// Rest data of one tet: the gradients of its four linear shape functions (so that
/// `F = sum_a x_a grad_a^T`) and its rest volume.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct TetRest {
    pub shape_gradients: [[f64; 3]; 4],
    pub volume: f64,
}

/// A vertex of a part some pin holds: it has no translation of its own.
pub(crate) const NO_GROUP: u32 = u32::MAX;

/// The fixed part of a simulation. Vertices of all bodies are numbered in the order the
/// bodies were added.
#[derive(Clone, Debug)]
pub struct Model {
    pub(crate) rest: Vec<[f64; 3]>,
    pub(crate) masses: Vec<f64>,
    pub(crate) pinned: Vec<bool>,
    pub(crate) gravity: [f64; 3],
    pub(crate) tets: Vec<[u32; 4]>,
    pub(crate) tet_rest: Vec<TetRest>,
    pub(crate) tet_material: Vec<Elastic>,
    pub(crate) springs: Vec<[u32; 2]>,
    pub(crate) spring_law: Vec<SpringLaw>,
    pub(crate) colliders: Vec<Collider>,
    /// How the colliders push back.
    pub(crate) contact: crate::contact::ContactModel,
    /// The tet bodies' contact with themselves and each other, if asked for.
    pub(crate) self_collision: Option<crate::contact::self_contact::SelfContact>,
}

impl Model {
    pub(crate) fn empty(gravity: [f64; 3]) -> Model {
        Model {
            rest: Vec::new(),
            masses: Vec::new(),
            pinned: Vec::new(),
            gravity,
            tets: Vec::new(),
            tet_rest: Vec::new(),
            tet_material: Vec::new(),
            springs: Vec::new(),
            spring_law: Vec::new(),
            colliders: Vec::new(),
            contact: crate::contact::ContactModel::Penalty { stiffness: 0.0 },
            self_collision: None,
        }
    }

    /// Appends a tetrahedral body with lumped masses from `density` (kg/m^3), of one material
    /// or of one per tet.
    pub(crate) fn add_tet_body(
        &mut self,
        mesh: &TetMesh,
        materials: &[Material],
        density: f64,
    ) -> Result<()> {
        crate::error::require_positive("density", density)?;
        mesh.validate()?;
        if materials.len() != 1 && materials.len() != mesh.tets().len() {
            return Err(Error::Parameter(format!(
                "a body of {} tets needs one material or one per tet, got {}",
                mesh.tets().len(),
                materials.len()
            )));
        }
        let elastic = materials.iter().map(Material::elastic).collect::<Result<Vec<_>>>()?;
        let offset = self.vertex_offset(mesh.vertex_count())?;
        self.rest.extend_from_slice(mesh.positions());
        self.masses.resize(self.rest.len(), 0.0);
        self.pinned.resize(self.rest.len(), false);
        for (e, tet) in mesh.tets().iter().enumerate() {
            let p = tet.map(|v| glam::DVec3::from(mesh.positions()[v as usize]));
            let volume = signed_volume(p[0].into(), p[1].into(), p[2].into(), p[3].into());
            let dm = glam::DMat3::from_cols(p[1] - p[0], p[2] - p[0], p[3] - p[0]);
            let dm_inv = dm.inverse();
            if !(volume > 0.0) || !dm_inv.is_finite() {
                return Err(Error::Mesh(format!("element {e} {tet:?} is degenerate")));
            }
            // Row c of Dm^-1 is the gradient of the shape function of vertex c + 1.
            let rows = crate::math::to_rows(&dm_inv);
            let first = [0, 1, 2].map(|j| -(rows[0][j] + rows[1][j] + rows[2][j]));
            let shape_gradients = [first, rows[0], rows[1], rows[2]];
            for &v in tet {
                self.masses[(offset + v) as usize] += density * volume / 4.0;
            }
            self.tets.push(tet.map(|v| v + offset));
            self.tet_rest.push(TetRest { shape_gradients, volume });
            self.tet_material.push(elastic[e % elastic.len()]);
        }
        if let Some(v) = (offset as usize..self.rest.len()).find(|&v| self.masses[v] <= 0.0) {
            return Err(Error::Mesh(format!(
                "vertex {} belongs to no tet, so it has no mass; remove unused vertices",
                v - offset as usize
            )));
        }
        Ok(())
    }

    /// The id of a new body's first vertex, or an error where its `vertices` would take the
    /// ids past what `u32` can name.
    fn vertex_offset(&self, vertices: usize) -> Result<u32> {
        let offset = self.rest.len();
        if offset.checked_add(vertices).is_none_or(|end| end > u32::MAX as usize) {
            return Err(Error::Parameter(format!(
                "a body of {vertices} vertices after {offset} would take the vertex ids past the {} \
                 that u32 can name; simulate fewer or smaller bodies",
                u32::MAX
            )));
        }
        Ok(offset as u32)
    }

    /// Appends a spring body.
    pub(crate) fn add_spring_body(&mut self, mesh: &SpringMesh) -> Result<()> {
        mesh.validate()?;
        let offset = self.vertex_offset(mesh.positions().len())?;
        self.rest.extend_from_slice(mesh.positions());
        self.masses.extend_from_slice(mesh.masses());
        self.pinned.resize(self.rest.len(), false);
        for spring in mesh.springs() {
            self.springs.push(spring.ends.map(|v| v + offset));
            self.spring_law.push(SpringLaw {
                kind: spring.kind,
                stiffness: spring.stiffness,
                rest: spring.rest,
            });
        }
        Ok(())
    }

    /// The triangles to draw: every tet body's boundary (outward wound) and every triangle of
    /// springs a spring body closes (a cloth's grid cells), in model vertex indices.
    pub fn surface_triangles(&self) -> Vec<[u32; 3]> {
        let mut triangles = crate::mesh::boundary_triangles(&self.tets);
        // Spring triangles a < b < c: b and c among a's higher neighbours, and joined.
        let mut higher: std::collections::BTreeMap<u32, Vec<u32>> = std::collections::BTreeMap::new();
        for &[a, b] in &self.springs {
            higher.entry(a.min(b)).or_default().push(a.max(b));
        }
        for list in higher.values_mut() {
            list.sort_unstable();
            list.dedup();
        }
        for (&a, list) in &higher {
            for (i, &b) in list.iter().enumerate() {
                let from_b = higher.get(&b).map(Vec::as_slice).unwrap_or(&[]);
                triangles.extend(
                    list[i + 1..].iter().filter(|c| from_b.binary_search(c).is_ok()).map(|&c| [a, b, c]),
                );
            }
        }
        triangles
    }

    /// How deep the tet bodies are in each other at `positions`: the largest distance from a
    /// boundary vertex inside a tet (of another body, or of a far part of its own) to the
    /// nearest boundary of the body it is in (m); zero when none is. A diagnostic, with or
    /// without self-collision.
    pub fn self_penetration(&self, positions: &[[f64; 3]]) -> crate::Result<f64> {
        if positions.len() != self.vertex_count() {
            return Err(Error::Parameter(format!(
                "{} positions for a model of {} vertices",
                positions.len(),
                self.vertex_count()
            )));
        }
        if positions.iter().flatten().any(|c| !c.is_finite()) {
            return Err(Error::Parameter("positions must be finite".into()));
        }
        let settings = crate::SelfCollision { stiffness: 1.0, friction: 0.0 };
        let built;
        let detection = match &self.self_collision {
            Some(detection) => detection,
            None => {
                built = crate::contact::self_contact::SelfContact::new(self, settings);
                &built
            }
        };
        Ok(detection.contacts(self, positions).iter().map(|c| c.offset.length()).fold(0.0, f64::max))
    }

    /// The part of every vertex, numbered in the order of each part's first vertex, and the
    /// number of parts: the vertices the elements connect (the Hessian's pattern), each part
    /// one body or a body's detached piece.
    pub(crate) fn parts(&self) -> (Vec<u32>, u32) {
        // Union-find over the elements, each set's root its least vertex.
        let n = self.vertex_count();
        let mut parent: Vec<u32> = (0..n as u32).collect();
        fn root(parent: &mut [u32], mut v: u32) -> u32 {
            while parent[v as usize] != v {
                parent[v as usize] = parent[parent[v as usize] as usize];
                v = parent[v as usize];
            }
            v
        }
        let corners = self.tets.iter().flat_map(|t| [[t[0], t[1]], [t[0], t[2]], [t[0], t[3]]]);
        for [a, b] in corners.chain(self.springs.iter().copied()) {
            let (a, b) = (root(&mut parent, a), root(&mut parent, b));
            parent[a.max(b) as usize] = a.min(b);
        }
        let mut part_of = vec![u32::MAX; n];
        let mut count = 0;
        for v in 0..n {
            // The root is at or before `v`, so numbered already unless it is `v`.
            let r = root(&mut parent, v as u32) as usize;
            if r == v {
                part_of[v] = count;
                count += 1;
            } else {
                part_of[v] = part_of[r];
            }
        }
        (part_of, count)
    }

    /// The translation group of every vertex (`NO_GROUP` for none) and the number of groups:
    /// each part ([`parts`](Self::parts)) no pin holds moves freely as a whole, its
    /// translations a null mode of the elasticity's Hessian, and is a group of its own, the
    /// groups numbered in part order.
    pub(crate) fn translation_groups(&self) -> (Vec<u32>, u32) {
        let (part_of, parts) = self.parts();
        let mut held = vec![false; parts as usize];
        for (v, &p) in part_of.iter().enumerate() {
            held[p as usize] |= self.pinned[v];
        }
        // The free parts' ranks among the free parts, in part order.
        let mut free_parts = 0;
        let rank: Vec<u32> = held
            .iter()
            .map(|&held| {
                let rank = if held { NO_GROUP } else { free_parts };
                free_parts += u32::from(!held);
                rank
            })
            .collect();
        (part_of.iter().map(|&p| rank[p as usize]).collect(), free_parts)
    }

    /// Number of vertices over all bodies.
    pub fn vertex_count(&self) -> usize {
        self.rest.len()
    }

    /// Number of tets over all bodies.
    pub fn tet_count(&self) -> usize {
        self.tets.len()
    }

    /// Lumped vertex masses (kg).
    pub fn masses(&self) -> &[f64] {
        &self.masses
    }

    /// Which vertices are pinned.
    pub fn pinned(&self) -> &[bool] {
        &self.pinned
    }

    /// Rest positions of all vertices.
    pub fn rest_positions(&self) -> &[[f64; 3]] {
        &self.rest
    }

    /// Static colliders.
    pub fn colliders(&self) -> &[Collider] {
        &self.colliders
    }

    /// The bodies' contact with themselves and each other
    /// (`SimulationBuilder::self_collision`), `None` without.
    pub fn self_collision(&self) -> Option<crate::SelfCollision> {
        self.self_collision.as_ref().map(|s| s.settings)
    }

    /// Whether the bodies can touch colliders or each other.
    pub(crate) fn has_contact(&self) -> bool {
        !self.colliders.is_empty() || self.self_collision.is_some()
    }

    /// Gravitational acceleration (m/s^2).
    pub fn gravity(&self) -> [f64; 3] {
        self.gravity
    }
}
