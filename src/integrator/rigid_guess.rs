//! The rigid guess: the end that puts each free part, at the step's nodes, where a rigid
//! body's step takes it, its shape at the start turned and moved as a whole.
//!
//! The optimization integrator's guesses move every vertex along its own straight line. A
//! spinning body's vertices then leave its circle: at 10 rad/s and h = 1/30 s a body is
//! stretched by 6 % at the guess, and a stiff one's solve has to find the rotation back. Its
//! Newton steps cannot: a step along the rotation's tangent stretches the body again by the
//! square of the angle, which a stiff body's energy refuses, so the line search cuts every
//! other step and the rotation converges linearly. A steel-stiff (E 1e9 Pa) cube spinning at
//! 10 rad/s took 18-28 Newton iterations a backward-Euler step with exact (Cholesky)
//! directions, 19-45 with CG, where a still one takes 2-3; from the rigid guess it takes 1-2.
//!
//! The rigid motion that fits the inertial target in the mass-weighted least-squares sense
//! (Kabsch) is where a rigid body's backward-Euler step goes: it minimizes the inertial term
//! over rigid motions, turning the body by `atan(h |w|)` where its inertia is isotropic, the
//! point of the circle nearest its tangent's. The guess competes with the others on the step
//! objective, so a body that deforms more than it turns keeps the explicit guess. A GPU
//! measures each free part from the same rigid step (`StepProblem::rigid_steps`).

use std::borrow::Cow;

use glam::{DMat3, DQuat, DVec3};

use crate::math::outer;
use crate::model::{Model, NO_GROUP};
use crate::objective::RigidStep;

/// The parts no pin holds (`Model::translation_groups`): each moves freely as a whole.
#[derive(Clone, Debug)]
pub(crate) struct FreeParts {
    /// Per vertex, its free part, or `NO_GROUP`.
    part_of: Vec<u32>,
    /// Per part, its first vertex, which its sums are taken relative to.
    first: Vec<usize>,
    /// The vertices of the free parts, part by part, each part's in ascending order: a chunk
    /// of them meets its parts one after another.
    members: Vec<u32>,
}

/// A part's sums over its vertices, relative to its first vertex (at the start for the start
/// and the guess, in the shape for the shape, in the node's target for the target), so that a
/// body far from the origin loses nothing to cancellation.
#[derive(Clone, Copy)]
struct Sums {
    mass: f64,
    members: usize,
    shape: DVec3,
    target: DVec3,
    /// `sum_v m_v (start_v + theta (guess_v - start_v))`: the centre of mass at the node.
    node: DVec3,
    /// `sum_v m_v target_v shape_v^T`.
    cross: DMat3,
}

impl Sums {
    fn add(&mut self, other: &Sums) {
        self.mass += other.mass;
        self.members += other.members;
        self.shape += other.shape;
        self.target += other.target;
        self.node += other.node;
        self.cross += other.cross;
    }

    // Not `Default`: glam's default matrix is the identity.
    const ZERO: Sums = Sums {
        mass: 0.0,
        members: 0,
        shape: DVec3::ZERO,
        target: DVec3::ZERO,
        node: DVec3::ZERO,
        cross: DMat3::ZERO,
    };
}

impl FreeParts {
    pub fn new(model: &Model) -> FreeParts {
        let (part_of, count) = model.translation_groups();
        let mut first = vec![usize::MAX; count as usize];
        for (v, &p) in part_of.iter().enumerate().rev() {
            if p != NO_GROUP {
                first[p as usize] = v;
            }
        }
        let mut members: Vec<u32> =
            (0..part_of.len() as u32).filter(|&v| part_of[v as usize] != NO_GROUP).collect();
        members.sort_by_key(|&v| part_of[v as usize]);
        FreeParts { part_of, first, members }
    }

    /// Whether the model has no free part.
    pub fn is_empty(&self) -> bool {
        self.first.is_empty()
    }

    /// Where a step's node at `theta` puts each free part as a rigid body (weighted by
    /// `masses`): its shape in `shape` turned as it fits the node's inertial target (`theta`
    /// of the way from `start` to `target`) best, its centre of mass moved `theta` of the way
    /// from `start`'s to `guess`'s; `None` for a part of one vertex or no mass.
    ///
    /// The node, not the end: a midpoint step of a stiff spinning body must keep its midpoint
    /// rigid, not its end (from a rigid end, the chord's middle is squeezed by 1 - cos of half
    /// the turn, 1.4 % at 10 rad/s). For the same reason the shape carried is the body's at
    /// the previous step's nodes where the nodes lie inside the step ([`FreeParts::shape`]):
    /// that step's end `2 z - x_(n-1)` was stretched by as much. The turn is fitted to the
    /// target rather than to the explicit guess, whose internal forces sum to no move and no
    /// torque but, times `h^2` over a stiff body's small masses, skew the fit: by 0.06 rad a
    /// step for a steel-stiff spinning cube, as far as the guess was meant to save.
    pub fn steps(
        &self,
        masses: &[f64],
        shape: &[[f64; 3]],
        start: &[[f64; 3]],
        target: &[[f64; 3]],
        guess: &[[f64; 3]],
        theta: f64,
    ) -> Vec<Option<RigidStep>> {
        if self.first.is_empty() {
            return Vec::new();
        }
        let at = |a: &[[f64; 3]], v: usize| DVec3::from(a[v]);
        // Each chunk of `members` sums the parts it meets, in turn; the chunks' sums are then
        // added in chunk order: the same bits whatever the thread count.
        let chunks = crate::math::per_chunk(self.members.len(), |range| {
            let mut met: Vec<(u32, Sums)> = Vec::new();
            for &v in &self.members[range] {
                let (v, p) = (v as usize, self.part_of[v as usize]);
                if met.last().is_none_or(|&(q, _)| q != p) {
                    met.push((p, Sums::ZERO));
                }
                let sum = &mut met.last_mut().expect("just pushed").1;
                let first = self.first[p as usize];
                let x = at(start, v) - at(start, first);
                let y = x + (at(target, v) - at(target, first) - x) * theta;
                let z = at(shape, v) - at(shape, first);
                let m = masses[v];
                sum.mass += m;
                sum.members += 1;
                sum.shape += z * m;
                sum.target += y * m;
                sum.node += (x + (at(guess, v) - at(start, v)) * theta) * m;
                sum.cross += outer(y * m, z);
            }
            met
        });
        let mut sums = vec![Sums::ZERO; self.first.len()];
        for (p, chunk) in chunks.into_iter().flatten() {
            sums[p as usize].add(&chunk);
        }
        sums.iter()
            .zip(&self.first)
            .map(|(sum, &first)| {
                if !(sum.mass > 0.0 && sum.members > 1) {
                    return None;
                }
                let (from, target) = (sum.shape / sum.mass, sum.target / sum.mass);
                // sum_v m_v (target_v - c_target) (shape_v - c_shape)^T, whose closest
                // rotation carries the shape onto the target best.
                let covariance = sum.cross - outer(target * sum.mass, from);
                let turn = crate::material::closest_rotation(&covariance, DQuat::IDENTITY).0;
                let to = at(start, first) + sum.node / sum.mass;
                turn.is_finite().then_some(RigidStep { from: at(shape, first) + from, to, turn })
            })
            .collect()
    }

    /// The positions whose shape [`FreeParts::steps`] carries for a step from `start`, after
    /// one from `previous` that balanced its forces at `theta` (`Outcome::theta`): that
    /// step's nodes, `theta` of the way from `previous` to `start`, where `theta < 1`; else
    /// (and for the first step, or without a free part) the start.
    pub fn shape<'a>(
        &self,
        start: &'a [[f64; 3]],
        previous: Option<&[[f64; 3]]>,
        theta: f64,
    ) -> Cow<'a, [[f64; 3]]> {
        match previous {
            Some(previous) if theta < 1.0 && !self.first.is_empty() => {
                Cow::Owned(super::combine([(1.0 - theta, previous), (theta, start)]))
            }
            _ => Cow::Borrowed(start),
        }
    }

    /// `guess` with each free part that has a step replaced by the end that puts its node at
    /// `theta` where the step does (`x_n + (z - x_n) / theta`, `z` the shape carried by the
    /// step); `None` without such a part.
    pub fn rigid_guess(
        &self,
        steps: &[Option<RigidStep>],
        shape: &[[f64; 3]],
        start: &[[f64; 3]],
        guess: &[[f64; 3]],
        theta: f64,
    ) -> Option<Vec<[f64; 3]>> {
        steps.iter().any(Option::is_some).then(|| {
            let turns: Vec<Option<(RigidStep, DMat3)>> =
                steps.iter().map(|step| step.map(|step| (step, DMat3::from_quat(step.turn)))).collect();
            crate::math::per_vertex(guess.len(), |v| match turns.get(self.part_of[v] as usize) {
                Some(Some((step, turn))) => {
                    let x = DVec3::from(start[v]);
                    let node = step.to + *turn * (DVec3::from(shape[v]) - step.from);
                    (x + (node - x) / theta).to_array()
                }
                _ => guess[v],
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::TetMesh;

    fn cube_model() -> Model {
        let mut model = Model::empty([0.0; 3]);
        let material = crate::Material::corotated(1e6, 0.3);
        model.add_tet_body(&TetMesh::bar([2, 2, 2], [0.1; 3]), &[material], 1000.0).unwrap();
        model
    }

    /// A spinning part's straight-line target is fitted by the rotation `atan(h |w|)` about
    /// the spin axis; its centre of mass goes where the guess's does, whatever the guess's
    /// shape. Near the origin and 20 km from it alike.
    #[test]
    fn a_spinning_parts_rigid_guess_turns_it_by_the_backward_euler_angle() {
        for far in [DVec3::ZERO, DVec3::new(1e4, -3e3, 2e4)] {
            spinning_cube_guess(far);
        }
    }

    fn spinning_cube_guess(far: DVec3) {
        let model = cube_model();
        let start: Vec<[f64; 3]> = model.rest.iter().map(|&x| (DVec3::from(x) + far).to_array()).collect();
        let (w, h, drift) = (DVec3::new(0.3, 1.0, 0.2) * 10.0, 1.0 / 30.0, DVec3::new(0.02, -0.01, 0.03));
        let centre = DVec3::splat(0.05) + far;
        let target: Vec<[f64; 3]> = start
            .iter()
            .map(|&x| {
                let r = DVec3::from(x) - centre;
                (DVec3::from(x) + w.cross(r) * h).to_array()
            })
            .collect();
        // A guess whose vertices move apart along x about its centre, which the fit ignores.
        let guess: Vec<[f64; 3]> = target
            .iter()
            .map(|&y| (DVec3::from(y) + drift + DVec3::X * (y[0] - centre.x)).to_array())
            .collect();
        let parts = FreeParts::new(&model);
        let steps = parts.steps(&model.masses, &start, &start, &target, &guess, 1.0);
        let rigid = parts.rigid_guess(&steps, &start, &start, &guess, 1.0).unwrap();
        let turn = DQuat::from_axis_angle(w.normalize(), (h * w.length()).atan());
        // f64's rounding of the positions, and no more (sums taken about the origin would
        // cancel the body's distance squared over its size squared).
        let within = 1e-12 + 1e-14 * far.length();
        for (x, y) in start.iter().zip(&rigid) {
            let expected = centre + drift + turn * (DVec3::from(*x) - centre);
            assert!(DVec3::from(*y).distance(expected) < within, "{y:?} against {expected}");
        }
    }

    /// Two cubes of 4 913 vertices each, so that the pass's chunks (`VERTEX_CHUNK`) end
    /// inside both and one meets both: each spinning cube gets its own rigid step, a turn by
    /// `atan(h |w|)` about its own spin, its centre where it was.
    #[test]
    fn parts_across_the_passs_chunks_get_their_own_rigid_steps() {
        let mut model = Model::empty([0.0; 3]);
        let material = crate::Material::corotated(1e6, 0.3);
        let cube = TetMesh::bar([16, 16, 16], [0.1; 3]);
        let moved = cube.positions().iter().map(|p| [p[0] + 1.0, p[1], p[2]]).collect();
        for mesh in [cube.clone(), TetMesh::new(moved, cube.tets().to_vec()).unwrap()] {
            model.add_tet_body(&mesh, std::slice::from_ref(&material), 1000.0).unwrap();
        }
        assert!(model.vertex_count() > 2 * crate::math::VERTEX_CHUNK);
        let h = 1.0 / 30.0;
        let spins = [DVec3::new(0.3, 1.0, 0.2) * 10.0, DVec3::new(-4.0, 0.5, 2.0)];
        let centres = [DVec3::splat(0.05), DVec3::new(1.05, 0.05, 0.05)];
        let part = |v: usize| usize::from(v >= cube.vertex_count());
        let start = model.rest.clone();
        let target: Vec<[f64; 3]> = (0..start.len())
            .map(|v| {
                let (x, p) = (DVec3::from(start[v]), part(v));
                (x + spins[p].cross(x - centres[p]) * h).to_array()
            })
            .collect();
        let parts = FreeParts::new(&model);
        let steps = parts.steps(&model.masses, &start, &start, &target, &target, 1.0);
        assert_eq!(steps.len(), 2);
        for p in 0..2 {
            let step = steps[p].unwrap();
            let turn = DQuat::from_axis_angle(spins[p].normalize(), (h * spins[p].length()).atan());
            let (off_turn, off_centre) = (step.turn.angle_between(turn), step.to.distance(centres[p]));
            println!("cube {p}: turn {off_turn:.1e} rad off, centre {off_centre:.1e} m off");
            assert!(off_turn < 1e-12 && off_centre < 1e-12, "cube {p}: {off_turn:e} rad, {off_centre:e} m");
        }
    }

    /// A bar, whose inertia is not isotropic, spun about a skew axis: its rigid step is the
    /// rigid motion nearest the target, so no small turn about the centre brings the turned
    /// shape closer (the weighted sum of `R r_v x (y_v - c_y)` vanishes), where a turn by
    /// atan(h |w|) about the spin misses by 8e-3 rad.
    #[test]
    fn a_rigid_step_is_the_rigid_motion_nearest_the_target() {
        let mut model = Model::empty([0.0; 3]);
        let material = crate::Material::corotated(1e6, 0.3);
        model.add_tet_body(&TetMesh::bar([4, 3, 2], [0.4, 0.3, 0.2]), &[material], 1000.0).unwrap();
        let start: Vec<[f64; 3]> = model.rest.clone();
        let (w, h) = (DVec3::new(3.0, -10.0, 4.0), 1.0 / 30.0);
        let target: Vec<[f64; 3]> =
            start.iter().map(|&x| (DVec3::from(x) + w.cross(DVec3::from(x)) * h).to_array()).collect();
        let step =
            FreeParts::new(&model).steps(&model.masses, &start, &start, &target, &target, 1.0)[0].unwrap();
        let torque = |turn: DQuat| {
            let mut sum = DVec3::ZERO;
            for ((x, y), m) in start.iter().zip(&target).zip(&model.masses) {
                let r = turn * (DVec3::from(*x) - step.from);
                sum += r.cross(DVec3::from(*y) - step.to) * *m;
            }
            sum.length()
        };
        let spun = DQuat::from_axis_angle(w.normalize(), (h * w.length()).atan());
        println!("turn {:.3e} rad from atan(h |w|) about the spin", step.turn.angle_between(spun));
        assert!(
            torque(step.turn) < 1e-12 * torque(spun),
            "{:e} against {:e}",
            torque(step.turn),
            torque(spun)
        );
    }

    /// After an implicit-midpoint step of a rigid spin, whose end `2 z - x_(n-1)` is stretched
    /// where its midpoint `z` is not, the next midpoint step's rigid guess puts its node at the
    /// previous node's shape, turned: every edge keeps its rest length. Carrying the start's
    /// shape would stretch the node's edges as the start's are.
    #[test]
    fn a_midpoint_steps_rigid_guess_carries_the_previous_midpoints_shape() {
        let model = cube_model();
        let parts = FreeParts::new(&model);
        let (axis, centre) = (DVec3::new(0.3, 1.0, 0.2).normalize(), DVec3::splat(0.05));
        let turned = |angle: f64| -> Vec<[f64; 3]> {
            let turn = DQuat::from_axis_angle(axis, angle);
            model.rest.iter().map(|&x| (centre + turn * (DVec3::from(x) - centre)).to_array()).collect()
        };
        let (previous, node) = (turned(0.0), turned(0.17));
        let start = super::super::combine([(2.0, &node), (-1.0, &previous)]);
        let target = super::super::combine([(2.0, &start), (-1.0, &node)]);
        let node_edges = |end: &[[f64; 3]]| -> f64 {
            let at = |v: usize| (DVec3::from(start[v]) + DVec3::from(end[v])) * 0.5;
            let rest = |v: usize| DVec3::from(model.rest[v]);
            let mut worst = 0.0f64;
            for tet in &model.tets {
                for (a, b) in [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)] {
                    let (a, b) = (tet[a] as usize, tet[b] as usize);
                    worst = worst.max((at(a).distance(at(b)) / rest(a).distance(rest(b)) - 1.0).abs());
                }
            }
            worst
        };
        let stretch = |previous_theta: f64| {
            let shape = parts.shape(&start, Some(&previous), previous_theta);
            let steps = parts.steps(&model.masses, &shape, &start, &target, &target, 0.5);
            node_edges(&parts.rigid_guess(&steps, &shape, &start, &target, 0.5).unwrap())
        };
        let (carried, from_start) = (stretch(0.5), stretch(1.0));
        println!(
            "the node's edges off their rest lengths by {carried:.2e}; from the start's shape {from_start:.2e}"
        );
        assert!(carried < 1e-12 && from_start > 1e-3, "{carried:e}, {from_start:e}");
    }

    /// A pinned part keeps the guess; without a free part there is no rigid guess.
    #[test]
    fn pinned_parts_keep_the_guess() {
        let mut model = cube_model();
        model.pinned[0] = true;
        let start = model.rest.clone();
        let guess: Vec<[f64; 3]> = start.iter().map(|x| [x[0] + x[1], x[1], x[2]]).collect();
        let parts = FreeParts::new(&model);
        let steps = parts.steps(&model.masses, &start, &start, &guess, &guess, 1.0);
        assert!(steps.is_empty() && parts.rigid_guess(&steps, &start, &start, &guess, 1.0).is_none());
    }
}
