import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.util.LongAccumulator;
import scala.Tuple2;

/**
 * JoinSum: textFile(fact) -> parse "k,v" (v as exact long thousandths) -> join(dim "k,attr", P), record by
 *          record -> mapToPair((attr, v)) -> reduceByKey(+, P) -> map to "attr\tsum" (3 decimals)
 *          -> saveAsTextFile(out).
 * Verification (number of attrs, exact sum of the sums in thousandths) comes from two LongAccumulators
 * updated in the final map, so the job is a single action. A fact key missing from dim is dropped
 * (inner join).
 * Args: dimDir factDir outputDir [numPartitions=8]
 */
public final class JoinSum {
    /** "[+-]DIGITS[.D{1,3}]" as integer thousandths. */
    static long thousandths(String s) {
        s = s.trim();
        boolean neg = s.startsWith("-");
        if (neg || s.startsWith("+")) {
            s = s.substring(1);
        }
        int dot = s.indexOf('.');
        String ip = dot < 0 ? s : s.substring(0, dot);
        String fp = dot < 0 ? "" : s.substring(dot + 1);
        if (fp.length() > 3) {
            throw new IllegalArgumentException("more than 3 decimals: " + s);
        }
        long t = Long.parseLong(ip) * 1000 + (fp.isEmpty() ? 0 : Long.parseLong((fp + "00").substring(0, 3)));
        return neg ? -t : t;
    }

    static String format(long t) {
        long a = Math.abs(t);
        return (t < 0 ? "-" : "") + (a / 1000) + "." + String.format("%03d", a % 1000);
    }

    public static void main(String[] args) throws Exception {
        double tMain = Common.sinceJvmStart();
        String dimIn = args[0], factIn = args[1], out = args[2];
        int parts = args.length > 3 ? Integer.parseInt(args[3]) : 8;
        Common.deleteLocal(out);

        long t0 = System.nanoTime();
        JavaSparkContext sc = new JavaSparkContext(new SparkConf().setAppName("anchor-joinsum"));
        long t1 = System.nanoTime();

        LongAccumulator attrs = sc.sc().longAccumulator("attrs");
        LongAccumulator total = sc.sc().longAccumulator("total");
        JavaPairRDD<Integer, Integer> dim = sc.textFile(dimIn).mapToPair(l -> {
            int c = l.indexOf(',');
            return new Tuple2<>(Integer.parseInt(l.substring(0, c).trim()), Integer.parseInt(l.substring(c + 1).trim()));
        });
        JavaPairRDD<Integer, Long> fact = sc.textFile(factIn).mapToPair(l -> {
            int c = l.indexOf(',');
            return new Tuple2<>(Integer.parseInt(l.substring(0, c).trim()), thousandths(l.substring(c + 1)));
        });
        fact.join(dim, parts)
                .mapToPair(t -> new Tuple2<>(t._2()._2(), t._2()._1()))
                .reduceByKey(Long::sum, parts)
                .map(t -> {
                    attrs.add(1);
                    total.add(t._2());
                    return t._1() + "\t" + format(t._2());
                }).saveAsTextFile(out);
        long t2 = System.nanoTime();

        sc.stop();
        long t3 = System.nanoTime();
        Common.report("job", "joinsum");
        Common.report("dim", dimIn);
        Common.report("input", factIn);
        Common.report("jvm_start_to_main_s", String.format("%.3f", tMain));
        Common.report("context_init_s", String.format("%.3f", Common.secs(t0, t1)));
        Common.report("in_job_s", String.format("%.3f", Common.secs(t1, t2)));
        Common.report("stop_s", String.format("%.3f", Common.secs(t2, t3)));
        Common.report("attrs", attrs.value());
        Common.report("sum_of_sums_exact", format(total.value()));
    }
}
