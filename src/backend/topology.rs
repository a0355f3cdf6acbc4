//! Incidence lists shared by both backends: which element corners touch each vertex (for the
//! gradient gather) and which element blocks sum into each block of the sparse Hessian (for
//! the assembly). Gathers instead of scatters keep every reduction in a fixed order, so the
//! results are deterministic without atomics.

use glam::DVec3;

use crate::backend::Anchor;
use crate::model::Model;

/// Marks a block source that is added transposed.
pub(crate) const TRANSPOSED: u32 = 1 << 31;

/// Index of block `(a, b)`, `a <= b`, among the upper blocks of an element of `n` corners.
pub(crate) const fn upper(a: usize, b: usize, n: usize) -> usize {
    a * n - a * (a + 1) / 2 + b
}

/// Where an element's block `(a, b)` is stored, flagged when it is the mirror of `(b, a)`.
fn source(first: u32, a: usize, b: usize, n: usize) -> u32 {
    if a <= b { first + upper(a, b, n) as u32 } else { (first + upper(b, a, n) as u32) | TRANSPOSED }
}

/// Element corner `a` of tet `e` is slot `4e + a`; corner `b` of spring `s` is `4T + 2s + b`.
/// Element Hessians are symmetric, so only blocks `(a, b)` with `a <= b` are stored: tet `e`
/// at `10e + upper(a, b)`, spring `s` at `10T + 3s + upper(a, b)`. A source with
/// [`TRANSPOSED`] set stands for the mirror block `(b, a)`, added transposed.
#[derive(Clone, Debug)]
pub(crate) struct Topology {
    /// Per vertex, the range of `corners` that touch it (CSR offsets).
    pub corner_offsets: Vec<u32>,
    /// Element corner slots, grouped by vertex.
    pub corners: Vec<u32>,
    /// Block-sparse (3x3) Hessian pattern: row offsets into `columns`.
    pub row_offsets: Vec<u32>,
    /// Block column of each stored block, sorted within each row.
    pub columns: Vec<u32>,
    /// Index of the diagonal block of each row.
    pub diagonal: Vec<u32>,
    /// Per stored block, the range of `block_sources` that sum into it.
    pub source_offsets: Vec<u32>,
    /// Element Hessian blocks, grouped by the stored block they belong to.
    pub block_sources: Vec<u32>,
}

impl Topology {
    pub fn new(model: &Model) -> Topology {
        let n = model.vertex_count();
        let tet_count = model.tets.len() as u32;
        let mut corner_list: Vec<(u32, u32)> =
            Vec::with_capacity(4 * model.tets.len() + 2 * model.springs.len());
        let mut block_list: Vec<(u32, u32, u32)> =
            Vec::with_capacity(16 * model.tets.len() + 4 * model.springs.len() + n);
        for (e, tet) in model.tets.iter().enumerate() {
            for (a, &va) in tet.iter().enumerate() {
                corner_list.push((va, 4 * e as u32 + a as u32));
                for (b, &vb) in tet.iter().enumerate() {
                    block_list.push((va, vb, source(10 * e as u32, a, b, 4)));
                }
            }
        }
        for (s, ends) in model.springs.iter().enumerate() {
            for (a, &va) in ends.iter().enumerate() {
                corner_list.push((va, 4 * tet_count + 2 * s as u32 + a as u32));
                for (b, &vb) in ends.iter().enumerate() {
                    block_list.push((va, vb, source(10 * tet_count + 3 * s as u32, a, b, 2)));
                }
            }
        }
        // Every vertex has a diagonal block (the mass term) even if no element touches it.
        const NO_SOURCE: u32 = u32::MAX;
        block_list.extend((0..n as u32).map(|v| (v, v, NO_SOURCE)));
        corner_list.sort_unstable();
        block_list.sort_unstable();

        let mut corner_offsets = vec![0u32; n + 1];
        for &(v, _) in &corner_list {
            corner_offsets[v as usize + 1] += 1;
        }
        for v in 0..n {
            corner_offsets[v + 1] += corner_offsets[v];
        }
        let corners = corner_list.into_iter().map(|(_, c)| c).collect();

        let mut row_offsets = vec![0u32; n + 1];
        let mut columns = Vec::new();
        let mut diagonal = vec![0u32; n];
        let mut source_offsets = vec![0u32];
        let mut block_sources = Vec::with_capacity(block_list.len());
        let mut previous: Option<(u32, u32)> = None;
        for (row, col, source) in block_list {
            if previous != Some((row, col)) {
                if previous.is_some() {
                    source_offsets.push(block_sources.len() as u32);
                }
                if row == col {
                    diagonal[row as usize] = columns.len() as u32;
                }
                columns.push(col);
                row_offsets[row as usize + 1] += 1;
                previous = Some((row, col));
            }
            if source != NO_SOURCE {
                block_sources.push(source);
            }
        }
        source_offsets.push(block_sources.len() as u32);
        for v in 0..n {
            row_offsets[v + 1] += row_offsets[v];
        }
        Topology { corner_offsets, corners, row_offsets, columns, diagonal, source_offsets, block_sources }
    }

    /// Number of stored 3x3 blocks.
    pub fn block_count(&self) -> usize {
        self.columns.len()
    }
}

pub(crate) use crate::model::NO_GROUP;

/// Handle springs grouped by vertex (CSR), so each vertex finds its own.
#[derive(Clone, Debug, Default)]
pub(crate) struct Anchors {
    /// Per vertex, the range of `springs` (empty when there are none at all).
    pub offsets: Vec<u32>,
    /// (stiffness, held position), grouped by vertex.
    pub springs: Vec<(f64, DVec3)>,
}

impl Anchors {
    pub fn new(vertex_count: usize, anchors: &[Anchor]) -> Anchors {
        if anchors.is_empty() {
            return Anchors::default();
        }
        let mut sorted: Vec<&Anchor> = anchors.iter().collect();
        sorted.sort_by_key(|a| a.vertex);
        let mut offsets = vec![0u32; vertex_count + 1];
        for a in &sorted {
            offsets[a.vertex as usize + 1] += 1;
        }
        for v in 0..vertex_count {
            offsets[v + 1] += offsets[v];
        }
        Anchors { offsets, springs: sorted.iter().map(|a| (a.stiffness, DVec3::from(a.position))).collect() }
    }

    pub(crate) fn of(&self, v: usize) -> &[(f64, DVec3)] {
        if self.offsets.is_empty() {
            &[]
        } else {
            &self.springs[self.offsets[v] as usize..self.offsets[v + 1] as usize]
        }
    }
}

/// Rows per slice of the GPU's sliced-ELLPACK matrix (`shaders/shared/matrix.wgsl`).
pub(crate) const SLICE: usize = 32;

/// Rows within which the layout sorts rows by length (the sigma of SELL-C-sigma): small, so
/// that a warp's rows stay near each other in every per-vertex vector.
pub(crate) const SORT_WINDOW: usize = 256;

/// The GPU's layout of the block-sparse matrix: sliced ELLPACK by [`SLICE`] rows with the
/// rows sorted by length within windows of [`SORT_WINDOW`] (SELL-C-sigma). Row `v` sits at
/// position `p = positions[v]` (`rows[p] = v`), and its block `j` in slot
/// `slice_bases[p / SLICE] + SLICE j + p % SLICE`: the rows one warp handles touch
/// consecutive slots, and each slice is as long as its longest row. Unsorted, the 5-tet
/// bar's alternating valences (8 and 18 blocks) padded every slice to its longest rows, and a
/// warp read half-used sectors for the longer half of its blocks.
#[derive(Clone, Debug)]
pub(crate) struct MatrixSlots {
    /// The first slot of each slice.
    pub slice_bases: Vec<u32>,
    /// Each row's position.
    pub positions: Vec<u32>,
    /// The row at each position.
    pub rows: Vec<u32>,
    /// Per slot, the block's column (a padding slot holds its own row).
    pub slot_columns: Vec<u32>,
    /// Per stored block (the CSR index), its slot.
    pub slot_of: Vec<u32>,
}

impl Topology {
    /// The sliced-ELLPACK slots of this pattern.
    pub(crate) fn matrix_slots(&self) -> MatrixSlots {
        MatrixSlots::new(&self.row_offsets, &self.columns)
    }
}

impl MatrixSlots {
    /// The slots of the compressed rows `row_offsets` (one more than the rows) and `columns`,
    /// the rows sorted by length (longest first, ties in order) within each window.
    pub(crate) fn new(row_offsets: &[u32], columns: &[u32]) -> MatrixSlots {
        let length = |v: usize| row_offsets[v + 1] - row_offsets[v];
        let mut rows: Vec<u32> = (0..row_offsets.len() as u32 - 1).collect();
        for window in rows.chunks_mut(SORT_WINDOW) {
            window.sort_by_key(|&v| std::cmp::Reverse(length(v as usize)));
        }
        MatrixSlots::in_order(row_offsets, columns, rows)
    }

    /// The slots of the compressed rows with the rows at the positions `rows` gives.
    pub(crate) fn in_order(row_offsets: &[u32], columns: &[u32], rows: Vec<u32>) -> MatrixSlots {
        let count = rows.len();
        let length = |p: usize| (row_offsets[rows[p] as usize + 1] - row_offsets[rows[p] as usize]) as usize;
        let longest: Vec<usize> = (0..count.div_ceil(SLICE))
            .map(|s| (s * SLICE..((s + 1) * SLICE).min(count)).map(length).max().unwrap_or(0))
            .collect();
        let mut slice_bases = Vec::with_capacity(longest.len());
        let mut slots = 0usize;
        for width in &longest {
            slice_bases.push(slots as u32);
            slots += SLICE * width;
        }
        let mut positions = vec![0u32; count];
        let mut slot_columns = vec![0u32; slots];
        let mut slot_of = vec![0u32; columns.len()];
        for (p, &v) in rows.iter().enumerate() {
            positions[v as usize] = p as u32;
            let base = slice_bases[p / SLICE] as usize + p % SLICE;
            for j in 0..longest[p / SLICE] {
                slot_columns[base + SLICE * j] = v;
            }
            for j in 0..length(p) {
                let index = row_offsets[v as usize] as usize + j;
                slot_of[index] = (base + SLICE * j) as u32;
                slot_columns[base + SLICE * j] = columns[index];
            }
        }
        MatrixSlots { slice_bases, positions, rows, slot_columns, slot_of }
    }

    /// The `row_slices` buffer of `shaders/shared/matrix.wgsl`: the slice bases, then the
    /// positions, then the rows.
    pub(crate) fn row_slices(&self) -> Vec<u32> {
        [&self.slice_bases[..], &self.positions, &self.rows].concat()
    }
}

#[cfg(test)]
mod tests {
    use super::{SLICE, Topology};
    use crate::backend::cpu::tests::mixed_model;
    use crate::material::Material;

    #[test]
    fn matrix_slots_hold_every_block_once_with_a_warp_s_rows_side_by_side() {
        let model = mixed_model(Material::stvk(1e4, 0.3));
        let topology = Topology::new(&model);
        let slots = topology.matrix_slots();
        let rows = model.vertex_count();
        assert!(rows > SLICE, "the test needs more than one slice");
        let mut seen = vec![false; slots.slot_columns.len()];
        for v in 0..rows {
            for (j, index) in (topology.row_offsets[v]..topology.row_offsets[v + 1]).enumerate() {
                let slot = slots.slot_of[index as usize] as usize;
                assert!(!seen[slot], "slot {slot} holds two blocks");
                seen[slot] = true;
                assert_eq!(slots.slot_columns[slot], topology.columns[index as usize]);
                // Row v's block j sits next to the next position's block j in the same slice.
                let p = slots.positions[v] as usize;
                assert_eq!(slots.rows[p] as usize, v);
                assert_eq!(slot, slots.slice_bases[p / SLICE] as usize + SLICE * j + p % SLICE);
            }
        }
        // Padding is what the longest row of each slice leaves over, and holds its own row.
        let padding = seen.iter().filter(|&&s| !s).count();
        assert_eq!(padding + topology.block_count(), slots.slot_columns.len());
        for (slot, _) in seen.iter().enumerate().filter(|(_, s)| !**s) {
            let slice = slots.slice_bases.partition_point(|&b| b as usize <= slot) - 1;
            let p = slice * SLICE + (slot - slots.slice_bases[slice] as usize) % SLICE;
            // (The last slice's positions past the end are never read.)
            if p < rows {
                assert_eq!(slots.slot_columns[slot], slots.rows[p]);
            }
        }
        println!("{} blocks in {} slots", topology.block_count(), slots.slot_columns.len());
    }

    /// The mixed model's bar (pinned at one end) and its springs (free) are two parts: the
    /// springs get group 0, the bar none; unpinned, the bar group 0 and the springs 1; and
    /// twelve free bars are twelve parts and twelve groups (eight groups were once the most,
    /// shared past that: a pile of twelve stiff cubes then fell centimetres off the CPU).
    #[test]
    fn free_parts_are_translation_groups() {
        use super::NO_GROUP;
        let mut model = mixed_model(Material::stvk(1e4, 0.3));
        let bar = model.tets.iter().flatten().map(|&v| v as usize + 1).max().unwrap();
        let (parts, count) = model.parts();
        assert_eq!(count, 2);
        assert!(parts[..bar].iter().all(|&p| p == 0) && parts[bar..].iter().all(|&p| p == 1));
        let (groups, count) = model.translation_groups();
        assert_eq!(count, 1);
        assert!(groups[..bar].iter().all(|&g| g == NO_GROUP));
        assert!(groups[bar..].iter().all(|&g| g == 0));
        model.pinned.iter_mut().for_each(|p| *p = false);
        let (groups, count) = model.translation_groups();
        assert_eq!(count, 2);
        assert!(groups[..bar].iter().all(|&g| g == 0) && groups[bar..].iter().all(|&g| g == 1));
        let mut bars = crate::model::Model::empty([0.0; 3]);
        let mesh = crate::mesh::TetMesh::bar([2, 1, 1], [0.2, 0.1, 0.1]);
        for _ in 0..12 {
            bars.add_tet_body(&mesh, &[Material::stvk(1e4, 0.3)], 1000.0).unwrap();
        }
        let (groups, count) = bars.translation_groups();
        assert_eq!(count, 12);
        let each = mesh.vertex_count();
        let (parts, count) = bars.parts();
        assert_eq!(count, 12);
        assert!(parts.iter().enumerate().all(|(v, &p)| p == (v / each) as u32));
        assert_eq!(groups, parts);
        // The PCG shader's twin.
        let (_, pcg) = crate::backend::gpu::shaders::SOURCES.iter().find(|(name, _)| *name == "pcg").unwrap();
        assert!(pcg.contains(&format!("const NO_GROUP: u32 = {NO_GROUP:#x}u;")));
    }

    #[test]
    fn the_benchmark_bar_s_slices_are_almost_unpadded() {
        let mut model = crate::model::Model::empty([0.0; 3]);
        model
            .add_tet_body(
                &crate::mesh::TetMesh::bar([20, 10, 10], [1.0, 0.5, 0.5]),
                &[Material::stvk(1e6, 0.3)],
                1e3,
            )
            .unwrap();
        let topology = Topology::new(&model);
        let slots = topology.matrix_slots().slot_columns.len();
        let (blocks, rows) = (topology.block_count(), model.vertex_count());
        println!(
            "bench bar: {rows} rows, {blocks} blocks ({:.1} per row), {slots} slots",
            blocks as f64 / rows as f64
        );
        // The 5-tet split alternates the valence of neighbouring vertices: in order, each
        // slice padded to its richest rows, 1.54x the blocks; sorted within windows, slices
        // hold rows of one length but at the windows' seams.
        assert!(slots as f64 <= 1.1 * blocks as f64, "{slots} slots for {blocks} blocks");
    }
}
