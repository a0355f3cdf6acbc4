// Where element outputs live on the GPU: structure of arrays, so that consecutive elements
// (threads) write consecutive memory. With T tets and S springs:
// - corner gradient entry i of tet e's corner a at float (3a + i) T + e, of spring s's end b
//   at 12 T + (3b + i) S + s;
// - column c of upper block u (its rows in x, y, z; w unused) of tet e at vec4 (3u + c) T + e,
//   of spring s at 30 T + (3u + c) S + s. A warp's threads store one column as one contiguous
//   run, and the assembly gathers a block as three aligned 16-byte loads (nine separate
//   floats, each in a sector of its own, before).
// Consumers name an output by the CPU twin's slot numbers (corner slot 4e + a or 4T + 2s + b;
// block source 10e + u or 10T + 3s + u), as the model's incidence lists do.

fn tet_corner_entry(e: u32, a: u32, i: u32, tet_count: u32) -> u32 {
    return (3u * a + i) * tet_count + e;
}

fn spring_corner_entry(s: u32, b: u32, i: u32, tet_count: u32, spring_count: u32) -> u32 {
    return 12u * tet_count + (3u * b + i) * spring_count + s;
}

fn tet_block_column(e: u32, u: u32, c: u32, tet_count: u32) -> u32 {
    return (3u * u + c) * tet_count + e;
}

fn spring_block_column(s: u32, u: u32, c: u32, tet_count: u32, spring_count: u32) -> u32 {
    return 30u * tet_count + (3u * u + c) * spring_count + s;
}

// Entry i of corner slot `slot`.
fn corner_entry(slot: u32, i: u32, tet_count: u32, spring_count: u32) -> u32 {
    if (slot < 4u * tet_count) {
        return tet_corner_entry(slot / 4u, slot % 4u, i, tet_count);
    }
    let local = slot - 4u * tet_count;
    return spring_corner_entry(local / 2u, local % 2u, i, tet_count, spring_count);
}

// Column c of stored block `source`.
fn block_column(source: u32, c: u32, tet_count: u32, spring_count: u32) -> u32 {
    if (source < 10u * tet_count) {
        return tet_block_column(source / 10u, source % 10u, c, tet_count);
    }
    let local = source - 10u * tet_count;
    return spring_block_column(local / 3u, local % 3u, c, tet_count, spring_count);
}
