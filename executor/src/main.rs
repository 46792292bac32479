//! `ember-executor`: the executor daemon. Cluster mode is the subject of the cluster
//! issue; until then this binary only explains that.

fn main() {
    eprintln!("ember-executor: cluster mode is not built yet; run jobs with --master local[N]");
    std::process::exit(2);
}
