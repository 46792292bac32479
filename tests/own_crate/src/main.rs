use ember::serde::{Deserialize, Serialize};

// Records cross processes, so they are serde types; `crate = "ember::serde"` lets the
// derive use the serde ember re-exports (no serde dependency of your own needed).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(crate = "ember::serde")]
struct Reading {
    city: String,
    celsius: f64,
}

fn main() -> Result<(), ember::EmberError> {
    let ctx = ember::Context::from_env()?; // first line of main: --master or EMBER_MASTER
    let args = ember::job_args(); // the command line without --master
    let output = &args[1];

    let lines = vec![
        "Oslo,3.5",
        "Lima,19.0",
        "Oslo,-1.5",
        "Lima,21.0",
        "Oslo,bad",
        "Cairo,30.0",
    ];
    let readings = ctx
        .parallelize(lines.into_iter().map(String::from).collect(), 2)
        .flat_map(|line: String| {
            let (city, t) = line.split_once(',')?;
            let celsius = t.parse().ok()?;
            Some(Reading {
                city: city.to_string(),
                celsius,
            })
        });

    // Closures capture nothing by default; name outer values in capture!.
    let min_celsius = 0.0;
    let mean_by_city = readings
        .filter(ember::capture!(min_celsius => |r: &Reading| r.celsius >= min_celsius))
        .map(|r: Reading| (r.city, (r.celsius, 1u32)))
        .reduce_by_key(|a: (f64, u32), b: (f64, u32)| (a.0 + b.0, a.1 + b.1))
        .map_values(|(sum, n): (f64, u32)| sum / f64::from(n));

    let mut means = mean_by_city.collect()?;
    means.sort_by(|a, b| a.0.cmp(&b.0));
    println!("{means:?}");
    mean_by_city
        .map(|(city, mean): (String, f64)| format!("{city}\t{mean:.2}"))
        .save_as_text_file(output)?;
    Ok(())
}
