// Stage `assemble`: a block-sparse matrix from the upper element blocks (mirrors added
// transposed, scaled by `element_scale`), the vertex blocks (`with_vertex_blocks`) and, when
// `damped`, Rayleigh's damping matrix; a workgroup per slice of the sliced layout's rows, an
// invocation per block, each block summing its sources in a fixed order. Pinned vertices get
// only their vertex block on the diagonal. The twin of src/backend/cpu/assemble.rs. It builds
// both the Newton matrix (whose vertex blocks hold the damping's) and, at the start of a step,
// Rayleigh's damping matrix itself (scale k/h, no vertex blocks).

#import shared/dispatch
#import shared/slots
#import shared/matrix

struct Params {
    vertex_count: u32,
    // 0 leaves the element blocks out.
    element_scale: f32,
    damped: u32,
    tet_count: u32,
    spring_count: u32,
    // 1: keep pressed vertices on their colliders (the projection model; `constrain_pressed`
    // in the CPU twin).
    constrained: u32,
    // 1: the vertex blocks on the diagonal; 0: a plain stiffness matrix.
    with_vertex_blocks: u32,
}

const TRANSPOSED: u32 = 0x80000000u;

@group(0) @binding(0) var<uniform> params: Params;

@group(1) @binding(0) var<storage, read> pinned: array<u32>;
@group(1) @binding(1) var<storage, read> row_offsets: array<u32>;
@group(1) @binding(2) var<storage, read> columns: array<u32>;
@group(1) @binding(3) var<storage, read> source_offsets: array<u32>;
@group(1) @binding(4) var<storage, read> block_sources: array<u32>;
@group(1) @binding(5) var<storage, read> row_slices: array<u32>;
@group(1) @binding(6) var<storage, read> slot_columns: array<u32>;
@group(1) @binding(7) var<storage, read> laplacian: array<f32>;

@group(3) @binding(0) var<storage, read> element_blocks: array<vec4<f32>>;
@group(3) @binding(1) var<storage, read> vertex_blocks: array<f32>;
@group(3) @binding(2) var<storage, read> damping_blocks: array<f32>;
@group(3) @binding(3) var<storage, read_write> blocks: array<f32>;
@group(3) @binding(4) var<storage, read> projective_diagonal: array<f32>;
@group(3) @binding(5) var<storage, read> pressed: array<vec4<f32>>;

// A 3x3 matrix from 9 row-major entries.
fn from_rows(e0: f32, e1: f32, e2: f32, e3: f32, e4: f32, e5: f32, e6: f32, e7: f32, e8: f32) -> mat3x3<f32> {
    return mat3x3<f32>(vec3<f32>(e0, e3, e6), vec3<f32>(e1, e4, e7), vec3<f32>(e2, e5, e8));
}

// Stored element block `source` (by column, see shared/slots.wgsl).
fn element_block(source: u32) -> mat3x3<f32> {
    let t = params.tet_count;
    let s = params.spring_count;
    return mat3x3<f32>(
        element_blocks[block_column(source, 0u, t, s)].xyz,
        element_blocks[block_column(source, 1u, t, s)].xyz,
        element_blocks[block_column(source, 2u, t, s)].xyz,
    );
}

fn vertex_block(v: u32) -> mat3x3<f32> {
    let o = 9u * v;
    return from_rows(
        vertex_blocks[o], vertex_blocks[o + 1u], vertex_blocks[o + 2u], vertex_blocks[o + 3u], vertex_blocks[o + 4u],
        vertex_blocks[o + 5u], vertex_blocks[o + 6u], vertex_blocks[o + 7u], vertex_blocks[o + 8u],
    );
}

fn damping_block(slot: u32) -> mat3x3<f32> {
    return from_rows(
        damping_blocks[matrix_entry(slot, 0u)], damping_blocks[matrix_entry(slot, 1u)],
        damping_blocks[matrix_entry(slot, 2u)], damping_blocks[matrix_entry(slot, 3u)],
        damping_blocks[matrix_entry(slot, 4u)], damping_blocks[matrix_entry(slot, 5u)],
        damping_blocks[matrix_entry(slot, 6u)], damping_blocks[matrix_entry(slot, 7u)],
        damping_blocks[matrix_entry(slot, 8u)],
    );
}

// `P_v B P_column`, `P = I - n n^T` at a pressed vertex (`I` elsewhere), and on a pressed
// vertex's diagonal `c n n^T` with `c` half the projected block's trace: the matrix stays
// definite and a step's normal part there is zero.
fn constrained(b: mat3x3<f32>, v: u32, column: u32) -> mat3x3<f32> {
    let row_press = pressed[v];
    let column_press = pressed[column];
    var block = b;
    if (row_press.w > 0.0) {
        block = projector(row_press.xyz) * block;
    }
    if (column_press.w > 0.0) {
        block = block * projector(column_press.xyz);
    }
    if (column == v && row_press.w > 0.0) {
        let n = row_press.xyz;
        let c = (block[0].x + block[1].y + block[2].z) / 2.0;
        block += mat3x3<f32>(n * n.x, n * n.y, n * n.z) * max(c, 1.1754944e-38);
    }
    return block;
}

// I - n n^T.
fn projector(n: vec3<f32>) -> mat3x3<f32> {
    return mat3x3<f32>(vec3<f32>(1.0, 0.0, 0.0) - n * n.x, vec3<f32>(0.0, 1.0, 0.0) - n * n.y, vec3<f32>(0.0, 0.0, 1.0) - n * n.z);
}

// The row position and the first entry of this invocation: a workgroup takes a slice of
// SLICE rows (WORKGROUP / SLICE entries of each at a time, lane = row), so that a row's entries
// are written by many invocations and a warp's writes are consecutive slots. One invocation per
// row, its entries one after another, left each a chain of dependent loads: 0.1 ms at 100K tets
// on an H200, 0.3 ms on the bunny's long rows.
fn slice_task(group: vec3<u32>, groups: vec3<u32>, lid: u32) -> vec2<u32> {
    return vec2<u32>(workgroup_slot(group, groups) * SLICE + lid % SLICE, lid / SLICE);
}

// The sum of the element blocks of CSR entry `index`, in their order (the loads of four
// sources issued before their sums).
fn element_sum(index: u32) -> mat3x3<f32> {
    var block = mat3x3<f32>();
    let end = source_offsets[index + 1u];
    var s = source_offsets[index];
    for (; s + 4u <= end; s += 4u) {
        let sources = vec4<u32>(block_sources[s], block_sources[s + 1u], block_sources[s + 2u], block_sources[s + 3u]);
        let b0 = element_block(sources.x & ~TRANSPOSED);
        let b1 = element_block(sources.y & ~TRANSPOSED);
        let b2 = element_block(sources.z & ~TRANSPOSED);
        let b3 = element_block(sources.w & ~TRANSPOSED);
        block += oriented(b0, sources.x);
        block += oriented(b1, sources.y);
        block += oriented(b2, sources.z);
        block += oriented(b3, sources.w);
    }
    for (; s < end; s++) {
        let source = block_sources[s];
        block += oriented(element_block(source & ~TRANSPOSED), source);
    }
    return block;
}

// A source's block as it enters the sum: its mirror is added transposed.
fn oriented(b: mat3x3<f32>, source: u32) -> mat3x3<f32> {
    if ((source & TRANSPOSED) == 0u) {
        return b;
    }
    return transpose(b);
}

@compute @workgroup_size(WORKGROUP)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let task = slice_task(group, groups, lid);
    let p = task.x;
    if (p >= matrix_rows()) {
        return;
    }
    let v = row_at(p);
    let first = row_offsets[v];
    let count = row_offsets[v + 1u] - first;
    for (var j = task.y; j < count; j += WORKGROUP / SLICE) {
        let index = first + j;
        let column = columns[index];
        let slot = position_slot(p, j);
        var block = mat3x3<f32>();
        if (pinned[v] != 0u || pinned[column] != 0u) {
            if (column == v && params.with_vertex_blocks != 0u) {
                block = vertex_block(v);
            }
        } else {
            if (params.element_scale != 0.0) {
                block = element_sum(index) * params.element_scale;
            }
            if (column == v && params.with_vertex_blocks != 0u) {
                block += vertex_block(v);
            }
            if (params.damped != 0u) {
                block += damping_block(slot);
            }
            if (params.constrained != 0u) {
                block = constrained(block, v, column);
            }
        }
        // Row-major entries, as the CPU twin's blocks.
        blocks[matrix_entry(slot, 0u)] = block[0].x;
        blocks[matrix_entry(slot, 1u)] = block[1].x;
        blocks[matrix_entry(slot, 2u)] = block[2].x;
        blocks[matrix_entry(slot, 3u)] = block[0].y;
        blocks[matrix_entry(slot, 4u)] = block[1].y;
        blocks[matrix_entry(slot, 5u)] = block[2].y;
        blocks[matrix_entry(slot, 6u)] = block[0].z;
        blocks[matrix_entry(slot, 7u)] = block[1].z;
        blocks[matrix_entry(slot, 8u)] = block[2].z;
    }
}

// The local/global solver's matrix `S (x) I3`, twin of `backend::projective::matrix`: the
// weighted Laplacian scaled by the step weight (`element_scale`) plus the vertex diagonal,
// with the rows and columns of pinned vertices those of the identity.
@compute @workgroup_size(WORKGROUP)
fn projective(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let task = slice_task(group, groups, lid);
    let p = task.x;
    if (p >= matrix_rows()) {
        return;
    }
    let v = row_at(p);
    let first = row_offsets[v];
    let count = row_offsets[v + 1u] - first;
    for (var j = task.y; j < count; j += WORKGROUP / SLICE) {
        let index = first + j;
        let column = columns[index];
        let slot = position_slot(p, j);
        var s = 0.0;
        if (pinned[v] != 0u || pinned[column] != 0u) {
            s = select(0.0, 1.0, column == v);
        } else {
            s = params.element_scale * laplacian[index];
            if (column == v) {
                s += projective_diagonal[v];
            }
        }
        for (var e = 0u; e < 9u; e++) {
            blocks[matrix_entry(slot, e)] = select(0.0, s, e % 4u == 0u);
        }
    }
}
