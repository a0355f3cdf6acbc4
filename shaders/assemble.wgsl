// Stage `assemble`: a block-sparse matrix from the upper element blocks (mirrors added
// transposed, scaled by `element_scale`), the vertex blocks and, when `damped`, the lagged
// damping matrix; one invocation per block row, each block summing its sources in a fixed
// order. Pinned vertices get only their vertex block on the diagonal.
// The twin of src/backend/cpu/assemble.rs. It builds both the Newton matrix and, at the
// start of a step, the lagged damping matrix itself (scale k/h, vertex blocks the per-vertex
// damping).

#import shared/dispatch

struct Params {
    vertex_count: u32,
    // 0 leaves the element blocks out.
    element_scale: f32,
    damped: u32,
}

const TRANSPOSED: u32 = 0x80000000u;

@group(0) @binding(0) var<uniform> params: Params;

@group(1) @binding(0) var<storage, read> pinned: array<u32>;
@group(1) @binding(1) var<storage, read> row_offsets: array<u32>;
@group(1) @binding(2) var<storage, read> columns: array<u32>;
@group(1) @binding(3) var<storage, read> source_offsets: array<u32>;
@group(1) @binding(4) var<storage, read> block_sources: array<u32>;

@group(3) @binding(0) var<storage, read> element_blocks: array<f32>;
@group(3) @binding(1) var<storage, read> vertex_blocks: array<f32>;
@group(3) @binding(2) var<storage, read> damping_blocks: array<f32>;
@group(3) @binding(3) var<storage, read_write> blocks: array<f32>;

@compute @workgroup_size(WORKGROUP)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    let v = index;
    if (v >= params.vertex_count) {
        return;
    }
    for (var index = row_offsets[v]; index < row_offsets[v + 1u]; index++) {
        let column = columns[index];
        var block: array<f32, 9>;
        if (pinned[v] != 0u || pinned[column] != 0u) {
            if (column == v) {
                for (var k = 0u; k < 9u; k++) {
                    block[k] = vertex_blocks[9u * v + k];
                }
            }
        } else {
            if (params.element_scale != 0.0) {
                for (var s = source_offsets[index]; s < source_offsets[index + 1u]; s++) {
                    let source = block_sources[s];
                    let base = 9u * (source & ~TRANSPOSED);
                    if ((source & TRANSPOSED) == 0u) {
                        for (var k = 0u; k < 9u; k++) {
                            block[k] += element_blocks[base + k];
                        }
                    } else {
                        for (var r = 0u; r < 3u; r++) {
                            for (var c = 0u; c < 3u; c++) {
                                block[3u * r + c] += element_blocks[base + 3u * c + r];
                            }
                        }
                    }
                }
                for (var k = 0u; k < 9u; k++) {
                    block[k] *= params.element_scale;
                }
            }
            if (column == v) {
                for (var k = 0u; k < 9u; k++) {
                    block[k] += vertex_blocks[9u * v + k];
                }
            }
            if (params.damped != 0u) {
                for (var k = 0u; k < 9u; k++) {
                    block[k] += damping_blocks[9u * index + k];
                }
            }
        }
        for (var k = 0u; k < 9u; k++) {
            blocks[9u * index + k] = block[k];
        }
    }
}
