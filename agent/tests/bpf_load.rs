//! Privileged: the embedded BPF object loads into the running kernel.
mod support;

#[test]
fn embedded_object_loads_into_this_kernel() {
    if support::skip_unless_root("embedded_object_loads_into_this_kernel") {
        return;
    }
    assert!(
        !memtide::bpf::OBJECT.is_empty(),
        "the test binary was built with AYA_BUILD_SKIP: no BPF object to load"
    );
    match memtide::bpf::probe_load() {
        Ok(detail) => eprintln!("{detail}"),
        Err(error) => panic!("loading the embedded BPF object failed: {error}"),
    }
}

#[test]
fn object_carries_every_program_and_map_the_agent_uses() {
    // Parsing needs no privileges: this guards against a stale or renamed object everywhere.
    if memtide::bpf::OBJECT.is_empty() {
        support::skip(
            "object_carries_every_program_and_map_the_agent_uses",
            "built with AYA_BUILD_SKIP=1",
        );
        return;
    }
    let object = aya_obj::Object::parse(memtide::bpf::OBJECT).expect("parse the BPF object");
    use memtide_common::names;
    for program in [
        names::PROG_SAMPLE_LOAD,
        names::PROG_SAMPLE_STORE,
        names::PROG_SAMPLE_ANY,
        names::PROG_DAMON_AGGREGATED,
    ] {
        assert!(
            object.programs.contains_key(program),
            "program {program} missing from the BPF object"
        );
    }
    for map in [
        names::MAP_SAMPLES,
        names::MAP_DAMON_REGIONS,
        names::MAP_TARGETS,
        names::MAP_DROPS,
    ] {
        assert!(
            object.maps.contains_key(map),
            "map {map} missing from the BPF object"
        );
    }
}
