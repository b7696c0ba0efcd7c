//! Statistics over a sweep: each point's figures aggregated over its seeds
//! (mean, sample standard deviation and the half-width of a 95% confidence
//! interval from Student's t), and percentiles by nearest rank.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// A figure over the seeds of one sweep point.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Spread {
    /// Seeds aggregated.
    pub n: usize,
    /// Their mean.
    pub mean: f64,
    /// Sample standard deviation (n - 1 in the denominator); 0 for one seed.
    pub sd: f64,
    /// Half-width of the 95% confidence interval of the mean, from Student's
    /// t with n - 1 degrees of freedom; none for one seed.
    pub ci95: Option<f64>,
}

/// The spread of `values` (one per seed).
pub fn spread(values: &[f64]) -> Spread {
    let n = values.len();
    if n == 0 {
        return Spread {
            n,
            mean: 0.0,
            sd: 0.0,
            ci95: None,
        };
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    if n == 1 {
        return Spread {
            n,
            mean,
            sd: 0.0,
            ci95: None,
        };
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let sd = var.sqrt();
    let t = StudentsT::new(0.0, 1.0, (n - 1) as f64).map_or(f64::NAN, |d| d.inverse_cdf(0.975));
    Spread {
        n,
        mean,
        sd,
        ci95: Some(t * sd / (n as f64).sqrt()),
    }
}

/// The paired difference `a - b` of two series run on the same workloads
/// (`a[i]` and `b[i]` from one seed): the spread of the differences seed
/// by seed. Every series of a point sees the same jobs, so most of the
/// variation between seeds is the workload's and cancels in the
/// difference: two series whose own intervals overlap can still differ
/// significantly, which their unpaired intervals cannot show.
pub fn paired(a: &[f64], b: &[f64]) -> Spread {
    let diffs: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    spread(&diffs)
}

impl Spread {
    /// Whether the 95% interval leaves out zero (none with one seed).
    pub fn excludes_zero(&self) -> bool {
        self.ci95.is_some_and(|ci| self.mean.abs() > ci)
    }
}

/// The ratio of two figures over the seeds, `sum(num) / sum(den)`, with
/// the 95% interval of a ratio estimator (the delta method: the residuals
/// `num - ratio * den` over the mean denominator), for shares whose
/// denominator varies by seed: a seed with few cases then weighs little,
/// where a mean of per-seed shares would let one case of one seed swing it.
/// `sd` is the residuals' standard deviation over the mean denominator.
pub fn ratio(num: &[f64], den: &[f64]) -> Spread {
    let n = num.len().min(den.len());
    let total: f64 = den[..n].iter().sum();
    if n == 0 || total <= 0.0 {
        return Spread {
            n,
            mean: 0.0,
            sd: 0.0,
            ci95: None,
        };
    }
    let r = num[..n].iter().sum::<f64>() / total;
    let residuals: Vec<f64> = num.iter().zip(den).map(|(y, x)| y - r * x).collect();
    let s = spread(&residuals);
    let mean_den = total / n as f64;
    Spread {
        n,
        mean: r,
        sd: s.sd / mean_den,
        ci95: s.ci95.map(|c| c / mean_den),
    }
}

/// The `p`-th percentiles (0 < p <= 100) of `values` by nearest rank (the
/// smallest value with at least p% of values at or below it), reordering
/// `values`; 0 for none.
pub fn percentiles<const K: usize>(values: &mut [f64], ps: [f64; K]) -> [f64; K] {
    let n = values.len();
    let mut out = [0.0; K];
    if n == 0 {
        return out;
    }
    for (o, p) in out.iter_mut().zip(ps) {
        let rank = ((p / 100.0 * n as f64).ceil() as usize).clamp(1, n);
        let (_, v, _) = values.select_nth_unstable_by(rank - 1, f64::total_cmp);
        *o = *v;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confidence_interval_as_computed_by_hand() {
        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, sum of squares 32, s^2 = 32/7,
        // t(0.975, 7) = 2.364624, half-width = 2.364624 * sqrt(32/7) / sqrt(8).
        let s = spread(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!((s.n, s.mean), (8, 5.0));
        assert!((s.sd - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        let by_hand = 2.364624 * (32.0f64 / 7.0).sqrt() / 8.0f64.sqrt();
        assert!((s.ci95.unwrap() - by_hand).abs() < 1e-5, "{s:?} against {by_hand}");
        // Three seeds: t(0.975, 2) = 4.302653.
        let s = spread(&[10.0, 12.0, 14.0]);
        assert!((s.ci95.unwrap() - 4.302653 * 2.0 / 3.0f64.sqrt()).abs() < 1e-5);
        // One seed has no interval.
        assert_eq!(spread(&[3.0]).ci95, None);
    }

    #[test]
    fn a_ratio_pools_the_seeds_and_its_interval_is_the_delta_methods() {
        let r = ratio(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]);
        assert_eq!((r.mean, r.ci95), (0.5, Some(0.0)));
        // 1/2 and 3/2: ratio 1, residuals -1 and 1 (s^2 = 2), mean
        // denominator 2: half-width t(0.975, 1) * sqrt(2 / 2) / 2.
        let r = ratio(&[1.0, 3.0], &[2.0, 2.0]);
        assert_eq!(r.mean, 1.0);
        assert!((r.ci95.unwrap() - 12.706205 / 2.0).abs() < 1e-5, "{r:?}");
        // A seed with one case weighs as one case: 64/1 beside 0/30 pools
        // to 64/31, where the mean of shares would be 32.
        let r = ratio(&[64.0, 0.0], &[1.0, 30.0]);
        assert!((r.mean - 64.0 / 31.0).abs() < 1e-12);
        assert_eq!(ratio(&[1.0], &[0.0]).mean, 0.0);
    }

    #[test]
    fn a_paired_interval_as_computed_by_hand() {
        // Two series over four seeds whose workloads differ far more than
        // the series do: a = 100, 200, 300, 400 and b = 98, 199, 297, 398.
        // Differences 2, 1, 3, 2: mean 2, s^2 = 2/3, t(0.975, 3) = 3.182446,
        // half-width 3.182446 * sqrt(2/3) / 2.
        let (a, b) = ([100.0, 200.0, 300.0, 400.0], [98.0, 199.0, 297.0, 398.0]);
        let d = paired(&a, &b);
        assert_eq!((d.n, d.mean), (4, 2.0));
        let by_hand = 3.182446 * (2.0f64 / 3.0).sqrt() / 2.0;
        assert!((d.ci95.unwrap() - by_hand).abs() < 1e-5, "{d:?} against {by_hand}");
        assert!(d.excludes_zero());
        // Unpaired, each series' own interval is about a hundred times as
        // wide, and the two overlap.
        let (sa, sb) = (spread(&a), spread(&b));
        assert!(sa.mean - sa.ci95.unwrap() < sb.mean + sb.ci95.unwrap());
        // Differences of both signs: the interval holds zero.
        assert!(!paired(&[1.0, 3.0], &[2.0, 2.0]).excludes_zero());
        assert!(!paired(&[1.0], &[0.0]).excludes_zero(), "one seed has no interval");
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let mut v: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        assert_eq!(percentiles(&mut v, [50.0, 90.0, 99.0, 100.0]), [5.0, 9.0, 10.0, 10.0]);
        assert_eq!(percentiles(&mut [7.0], [1.0, 50.0]), [7.0, 7.0]);
        assert_eq!(percentiles(&mut [], [50.0]), [0.0]);
    }
}
