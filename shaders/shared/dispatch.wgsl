// Invocations per workgroup in every stage (`WORKGROUP` in src/backend/gpu/stage.rs).
const WORKGROUP: u32 = 256u;

// A dispatch beyond the 65 535 workgroups one dimension allows spans two (rows of
// `groups.x`): the workgroup's place in the whole dispatch. The last row may run past the
// work; entries check their index, and a workgroup past the end writes no partial sum.
fn workgroup_slot(group: vec3<u32>, groups: vec3<u32>) -> u32 {
    return group.x + group.y * groups.x;
}
