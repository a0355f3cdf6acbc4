//! An axis-aligned bounding-box tree over any primitives given by their boxes: built once by
//! median splits, refitted when the primitives move (a deforming body keeps its tree's shape
//! and only updates the boxes), and searched for the nearest primitive or for those whose box
//! holds a point or overlaps a box.

use glam::DVec3;

/// Primitives per leaf: small enough that a query visits few of them, large enough that the
/// tree stays shallow.
const LEAF_SIZE: usize = 4;

/// A box, `lo <= hi` componentwise (an empty one has `lo = +inf`, `hi = -inf`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Aabb {
    pub lo: DVec3,
    pub hi: DVec3,
}

impl Aabb {
    pub(crate) const EMPTY: Aabb = Aabb { lo: DVec3::INFINITY, hi: DVec3::NEG_INFINITY };

    /// The box of `points`.
    pub(crate) fn of(points: impl IntoIterator<Item = DVec3>) -> Aabb {
        points.into_iter().fold(Aabb::EMPTY, |b, p| Aabb { lo: b.lo.min(p), hi: b.hi.max(p) })
    }

    fn union(self, other: Aabb) -> Aabb {
        Aabb { lo: self.lo.min(other.lo), hi: self.hi.max(other.hi) }
    }

    /// Squared distance from `p` to the box (zero inside).
    pub(crate) fn distance_squared(&self, p: DVec3) -> f64 {
        (self.lo - p).max(p - self.hi).max(DVec3::ZERO).length_squared()
    }

    pub(crate) fn overlaps(&self, other: &Aabb) -> bool {
        !(self.lo.cmpgt(other.hi).any() || self.hi.cmplt(other.lo).any())
    }
}

#[derive(Clone, Debug)]
struct Node {
    bounds: Aabb,
    /// Leaf: its primitives are `order[first..first + count]`. Inner: `count == 0`, its left
    /// child follows it and `first` is its right child. Children come after their parent,
    /// so a pass from the last node to the first sees children before parents.
    first: u32,
    count: u32,
}

/// The tree.
#[derive(Clone, Debug)]
pub(crate) struct Bvh {
    nodes: Vec<Node>,
    /// Primitive indices, each leaf a contiguous run.
    order: Vec<u32>,
}

impl Bvh {
    /// The tree over primitives with these boxes (an empty tree for none).
    pub(crate) fn new(boxes: &[Aabb]) -> Bvh {
        let centroids: Vec<DVec3> = boxes.iter().map(|b| (b.lo + b.hi) * 0.5).collect();
        let mut order: Vec<u32> = (0..boxes.len() as u32).collect();
        let mut tree = Bvh { nodes: Vec::with_capacity(2 * boxes.len() / LEAF_SIZE + 1), order: Vec::new() };
        if !boxes.is_empty() {
            tree.build(&mut order, 0, &centroids);
        }
        tree.order = order;
        tree.refit(boxes);
        tree
    }

    fn build(&mut self, order: &mut [u32], offset: usize, centroids: &[DVec3]) -> usize {
        let index = self.nodes.len();
        self.nodes.push(Node { bounds: Aabb::EMPTY, first: offset as u32, count: order.len() as u32 });
        if order.len() <= LEAF_SIZE {
            return index;
        }
        // Split at the median centroid along the widest axis of the centroids.
        let spread = Aabb::of(order.iter().map(|&t| centroids[t as usize]));
        let axis = (spread.hi - spread.lo).max_position();
        let half = order.len() / 2;
        order.select_nth_unstable_by(half, |&a, &b| {
            centroids[a as usize][axis].total_cmp(&centroids[b as usize][axis])
        });
        let (left, right) = order.split_at_mut(half);
        self.build(left, offset, centroids);
        let right_index = self.build(right, offset + half, centroids);
        self.nodes[index].count = 0;
        self.nodes[index].first = right_index as u32;
        index
    }

    /// Updates every node's box for the primitives' new `boxes` (same count, same order).
    pub(crate) fn refit(&mut self, boxes: &[Aabb]) {
        for n in (0..self.nodes.len()).rev() {
            let node = &self.nodes[n];
            let bounds = if node.count > 0 {
                self.order[node.first as usize..(node.first + node.count) as usize]
                    .iter()
                    .fold(Aabb::EMPTY, |b, &t| b.union(boxes[t as usize]))
            } else {
                self.nodes[n + 1].bounds.union(self.nodes[node.first as usize].bounds)
            };
            self.nodes[n].bounds = bounds;
        }
    }

    /// The primitive nearest to `p` and its squared distance, where `distance_squared(t)` is
    /// primitive `t`'s (`None` for one to skip); `None` when every primitive is skipped.
    pub(crate) fn nearest(
        &self,
        p: DVec3,
        mut distance_squared: impl FnMut(u32) -> Option<f64>,
    ) -> Option<(u32, f64)> {
        let mut best: Option<(u32, f64)> = None;
        let bound = |best: &Option<(u32, f64)>| best.map_or(f64::INFINITY, |b| b.1);
        let mut stack = Vec::with_capacity(64);
        if !self.nodes.is_empty() {
            stack.push(0usize);
        }
        while let Some(n) = stack.pop() {
            let node = &self.nodes[n];
            if node.bounds.distance_squared(p) >= bound(&best) {
                continue;
            }
            if node.count > 0 {
                for &t in &self.order[node.first as usize..(node.first + node.count) as usize] {
                    if let Some(d) = distance_squared(t)
                        && d < bound(&best)
                    {
                        best = Some((t, d));
                    }
                }
            } else {
                // Nearer child last, so it is searched first.
                let (left, right) = (n + 1, node.first as usize);
                let (dl, dr) = (
                    self.nodes[left].bounds.distance_squared(p),
                    self.nodes[right].bounds.distance_squared(p),
                );
                if dl < dr {
                    stack.extend([right, left]);
                } else {
                    stack.extend([left, right]);
                }
            }
        }
        best
    }

    /// Per node, `[first, count]` as the GPU twin reads it (shaders/self_contact.wgsl): a
    /// leaf's primitives are `order()[first..first + count]`; an inner node (`count` 0) has
    /// its left child right after it and its right child at `first`.
    pub(crate) fn links(&self) -> Vec<[u32; 2]> {
        self.nodes.iter().map(|n| [n.first, n.count]).collect()
    }

    /// The primitives, each leaf a contiguous run.
    pub(crate) fn order(&self) -> &[u32] {
        &self.order
    }

    /// Each node's depth (the root's is 0).
    pub(crate) fn depths(&self) -> Vec<u32> {
        let mut depth = vec![0; self.nodes.len()];
        for (n, node) in self.nodes.iter().enumerate() {
            if node.count == 0 {
                depth[n + 1] = depth[n] + 1;
                depth[node.first as usize] = depth[n] + 1;
            }
        }
        depth
    }

    /// Calls `visit` on every primitive whose box overlaps `query`, and on some others (those
    /// sharing a leaf with one: the tree keeps no box per primitive), each once.
    pub(crate) fn overlapping(&self, query: &Aabb, mut visit: impl FnMut(u32)) {
        let mut stack = Vec::with_capacity(64);
        if !self.nodes.is_empty() {
            stack.push(0usize);
        }
        while let Some(n) = stack.pop() {
            let node = &self.nodes[n];
            if !node.bounds.overlaps(query) {
                continue;
            }
            if node.count > 0 {
                for &t in &self.order[node.first as usize..(node.first + node.count) as usize] {
                    visit(t);
                }
            } else {
                stack.extend([n + 1, node.first as usize]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_boxes(count: usize, seed: u64) -> Vec<Aabb> {
        let mut seed = seed;
        let mut random = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        (0..count)
            .map(|_| {
                let lo = DVec3::new(random(), random(), random()) * 4.0 - 2.0;
                Aabb { lo, hi: lo + DVec3::new(random(), random(), random()) * 0.3 }
            })
            .collect()
    }

    #[test]
    fn queries_match_brute_force_before_and_after_a_refit() {
        let mut boxes = random_boxes(300, 3);
        let mut tree = Bvh::new(&boxes);
        let probes = random_boxes(100, 11);
        let mut overlaps = 0;
        for round in 0..2 {
            for probe in &probes {
                let p = probe.lo;
                // The nearest box, skipping every third primitive.
                let distance = |t: u32| (!t.is_multiple_of(3)).then(|| boxes[t as usize].distance_squared(p));
                let fast = tree.nearest(p, distance).unwrap();
                let slow = (0..boxes.len() as u32)
                    .filter_map(|t| distance(t).map(|d| (t, d)))
                    .min_by(|a, b| a.1.total_cmp(&b.1))
                    .unwrap();
                assert_eq!(fast.1, slow.1, "round {round}");
                let mut found = Vec::new();
                tree.overlapping(probe, |t| found.push(t));
                found.sort_unstable();
                let visited = found.len();
                found.dedup();
                assert_eq!(found.len(), visited, "each once");
                let expected: Vec<u32> =
                    (0..boxes.len() as u32).filter(|&t| boxes[t as usize].overlaps(probe)).collect();
                assert!(expected.iter().all(|t| found.binary_search(t).is_ok()), "round {round}");
                overlaps += expected.len();
            }
            // Move every box and refit: the same queries hold on the new boxes.
            for (i, b) in boxes.iter_mut().enumerate() {
                let shift = DVec3::new((i as f64).sin(), (i as f64 * 0.7).cos(), 0.3) * 0.5;
                *b = Aabb { lo: b.lo + shift, hi: b.hi + shift * 1.2 };
            }
            tree.refit(&boxes);
        }
        assert!(overlaps > 10, "the probes overlap some boxes: {overlaps}");
        assert_eq!(Bvh::new(&[]).nearest(DVec3::ZERO, |_| Some(0.0)), None);
    }
}
