// Where element outputs live on the GPU: structure of arrays, one array per output entry, so
// that consecutive elements (threads) write consecutive floats. With T tets and S springs:
// - corner gradient entry i of tet e's corner a at (3a + i) T + e, of spring s's end b at
//   12 T + (3b + i) S + s;
// - entry k (row-major) of upper block u of tet e at (9u + k) T + e, of spring s at
//   90 T + (9u + k) S + s.
// Consumers name an output by the CPU twin's slot numbers (corner slot 4e + a or 4T + 2s + b;
// block source 10e + u or 10T + 3s + u), as the model's incidence lists do.

fn tet_corner_entry(e: u32, a: u32, i: u32, tet_count: u32) -> u32 {
    return (3u * a + i) * tet_count + e;
}

fn spring_corner_entry(s: u32, b: u32, i: u32, tet_count: u32, spring_count: u32) -> u32 {
    return 12u * tet_count + (3u * b + i) * spring_count + s;
}

fn tet_block_entry(e: u32, u: u32, k: u32, tet_count: u32) -> u32 {
    return (9u * u + k) * tet_count + e;
}

fn spring_block_entry(s: u32, u: u32, k: u32, tet_count: u32, spring_count: u32) -> u32 {
    return 90u * tet_count + (9u * u + k) * spring_count + s;
}

// Entry i of corner slot `slot`.
fn corner_entry(slot: u32, i: u32, tet_count: u32, spring_count: u32) -> u32 {
    if (slot < 4u * tet_count) {
        return tet_corner_entry(slot / 4u, slot % 4u, i, tet_count);
    }
    let local = slot - 4u * tet_count;
    return spring_corner_entry(local / 2u, local % 2u, i, tet_count, spring_count);
}

// Entry k of stored block `source`.
fn block_entry(source: u32, k: u32, tet_count: u32, spring_count: u32) -> u32 {
    if (source < 10u * tet_count) {
        return tet_block_entry(source / 10u, source % 10u, k, tet_count);
    }
    let local = source - 10u * tet_count;
    return spring_block_entry(local / 3u, local % 3u, k, tet_count, spring_count);
}
