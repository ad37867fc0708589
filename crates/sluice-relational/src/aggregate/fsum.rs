//! Exact float sums (Shewchuk's algorithm, as in Python's `math.fsum`): regrouping the
//! additions cannot change a bit, so sums do not depend on the budget or thread count.

/// Adds `x` to Shewchuk partials (non-overlapping, increasing magnitude): exact.
pub(super) fn fsum_add(partials: &mut Vec<f64>, mut x: f64) {
    let mut i = 0;
    for j in 0..partials.len() {
        let mut y = partials[j];
        if x.abs() < y.abs() {
            std::mem::swap(&mut x, &mut y);
        }
        let hi = x + y;
        let lo = y - (hi - x);
        if lo != 0.0 {
            partials[i] = lo;
            i += 1;
        }
        x = hi;
    }
    partials.truncate(i);
    partials.push(x);
}

/// The correctly rounded value of the partials' exact sum (Python's `math.fsum` ending).
pub(super) fn fsum_total(partials: &[f64]) -> f64 {
    let mut n = partials.len();
    if n == 0 {
        return 0.0;
    }
    n -= 1;
    let mut hi = partials[n];
    let mut lo = 0.0;
    while n > 0 {
        let x = hi;
        n -= 1;
        let y = partials[n];
        hi = x + y;
        let yr = hi - x;
        lo = y - yr;
        if lo != 0.0 {
            break;
        }
    }
    // Round half to even across the remaining partials.
    if n > 0 && ((lo < 0.0 && partials[n - 1] < 0.0) || (lo > 0.0 && partials[n - 1] > 0.0)) {
        let y = lo * 2.0;
        let x = hi + y;
        if y == x - hi {
            hi = x;
        }
    }
    hi
}

#[cfg(test)]
pub(super) fn fsum(xs: &[f64]) -> f64 {
    let mut p = Vec::new();
    for &x in xs {
        fsum_add(&mut p, x);
    }
    fsum_total(&p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_sums_are_exact_whatever_the_order() {
        assert_eq!(fsum(&[1e100, 1.0, -1e100]), 1.0);
        assert_eq!(fsum(&[0.1; 10]), 1.0);
        let xs: Vec<f64> = (0..1000)
            .map(|i| ((i * 7919) % 1000) as f64 * 1.1e-3 - 0.37)
            .collect();
        let mut rev = xs.clone();
        rev.reverse();
        assert_eq!(fsum(&xs).to_bits(), fsum(&rev).to_bits());
    }
}
