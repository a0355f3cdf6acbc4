// Where a workgroup's invocations sit in its subgroups: each writes the subgroup size if it is
// lane `lid % size` of subgroup `lid / size` (what shared/reduce_subgroup assumes), else 0.
// `GpuContext` runs it once, at the stages' workgroup sizes, before it chooses that module.

override WIDTH: u32 = 256u;

@group(0) @binding(0) var<storage, read_write> placement: array<u32>;

@compute @workgroup_size(WIDTH)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) size: u32,
) {
    placement[lid] = select(0u, size, subgroup * size + lane == lid);
}
