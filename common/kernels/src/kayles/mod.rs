//! Partisan Kayles (`kayles` jobs, seed 001): `f(n)`, the number of fair rows of
//! `n` blue and red pins, modulo `10^d`.
//!
//! ## Mathematics
//!
//! A row is fair (the second player wins) exactly when it has as many blue as
//! red pins and the mixed-pair game on its alternating blocks, Dawson's Kayles,
//! has nim-sum `x = g(L_1) ^ ... ^ g(L_k) = 0`; with a lead `d != 0` the player
//! ahead wins, with `d = 0` and `x != 0` the first player wins. So `f(n) = 0` for
//! odd `n`, and for `n = 2m`, with `b` the bit length of the largest `g(L)`,
//! `L <= n`, and the Walsh signs `w_h(L) = (-1)^popcount(h & g(L))`,
//!
//! `f(2m) = 2^-b sum_{h < 2^b} c_h(m)`, where
//! `sum_m c_h(m) u^m = sqrt(((1+E)^2 - O^2) / ((1-E)^2 - O^2))`,
//! `E = sum_{j>=1} w_h(2j) u^j` and `O^2 = u (sum_{j>=0} w_h(2j+1) u^j)^2`.
//!
//! ## Computation
//!
//! Two independent methods give the coefficients `c_h(k) mod M` of a character,
//! `M = 2^b 10^d`; both take the quotient `s` from a short linear recurrence
//! (the signs are periodic, see `rational`).
//!
//! *Quadratic*, [`CharacterSeries`]: the root `r` from
//! `2 r_k = s_k - sum_{0<i<k} r_i r_{k-i}`, which costs `k / 2` multiplications
//! by symmetry. The right side is needed modulo `2M = 2^(b+1) 10^d` to get `r_k`
//! modulo `M` (the halving rule), and `2M = 2^(b+1+d) * 5^d` is split by the
//! CRT: modulo `2^(b+1+d)` the products wrap in `u16`/`u32` lanes and halving
//! keeps `b + d` bits (proof in `residues`); modulo `5^d` two is invertible. The
//! two root residues join into `c_h(m) mod M`.
//!
//! *Fast*, [`character_coefficients_fast`] and [`fair_rows_fast`]: the root by
//! Newton's iteration, `O(m log m)`, on exact integer convolutions (number
//! theoretic transforms over three or more primes below `2^30`, joined by
//! Garner's form of the CRT, `ntt`). It works modulo `2M` itself while `2M` is
//! below `2^63`, and otherwise modulo `2^(b+1+d)` and `5^d` joined by the CRT;
//! `newton` proves why a square modulo `2M` needs the root only modulo `M` and
//! why each step's values to halve are even.
//!
//! [`combine`] sums the characters (the true sum is `2^b f(n)`, so the sum
//! modulo `M` is divisible by `2^b`) and divides. [`fair_rows`] takes the fast
//! path from [`FAST_PINS`] pins on.

mod fast;
mod field;
mod grundy;
mod newton;
mod ntt;
#[cfg(target_arch = "x86_64")]
mod ntt_avx2;
mod rational;
mod residues;
#[cfg(test)]
mod tests;

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::modular::{inv_mod, mul_mod};
use crate::{Control, Error, Result, invalid};

pub use fast::{character_coefficients_fast, character_value_fast, fair_rows_fast};
pub use grundy::{character_bits, grundy_values};
use residues::Residues;

/// The default number of trailing digits of `f(n)`.
pub const DEFAULT_DIGITS: u32 = 9;
/// The largest accepted pin count. The fast path's time is `O(n log n)` and its
/// memory linear in the pins (a peak of 1.0 to 1.15 GB measured for `f(10^7)`
/// on two threads); its transforms would allow up to about `1.6 * 10^7` pins.
pub const MAX_PINS: u64 = 10_000_000;
/// The largest accepted number of digits.
pub const MAX_DIGITS: u32 = 18;

/// Identifies checkpoints of this kernel ("KAYLES" and a format version).
const CHECKPOINT_MAGIC: u64 = 0x4b41_594c_4553_0001;
/// Header words of a checkpoint: magic, pins, digits, character, b, computed.
const CHECKPOINT_HEADER: usize = 6;
/// Multiply-adds between two polls of the control.
const POLL_WORK: u64 = 1 << 20;

/// Checks a `kayles` job's parameters.
pub fn validate(pins: u64, digits: u32) -> Result<()> {
    if pins % 2 == 1 {
        return Err(invalid!(
            "pins must be even, got {pins}: a fair row has as many blue as red pins, \
             so no row of odd length is fair (f(n) = 0 for odd n)"
        ));
    }
    if pins > MAX_PINS {
        return Err(invalid!(
            "pins must be at most {MAX_PINS}, got {pins} (the limit bounds the memory and \
             time of a job, which grow with the pins)"
        ));
    }
    if !(1..=MAX_DIGITS).contains(&digits) {
        return Err(invalid!(
            "digits must be between 1 and {MAX_DIGITS}, got {digits}"
        ));
    }
    Ok(())
}

/// The number `2^b` of Walsh characters for rows of `pins` pins.
pub fn character_count(pins: u64) -> u32 {
    1 << grundy::bits_for_pins(pins)
}

/// `M = 2^b * 10^d`: every character value is reported modulo `M`.
pub fn character_modulus(pins: u64, digits: u32) -> u128 {
    (1u128 << grundy::bits_for_pins(pins)) * 10u128.pow(digits)
}

/// Work units of a whole job: one per coefficient of every character, as
/// [`CharacterSeries::advance`], [`fair_rows_quadratic`] and the fast path
/// ([`fair_rows_fast`], [`character_coefficients_fast`]) add them to their
/// [`Control`]. The fast path adds a character's units as its Newton steps
/// finish: after the step to `k` known coefficients, `k` units in all, which
/// tracks its time since each step costs about twice the one before.
pub fn total_work(pins: u64) -> u64 {
    u64::from(character_count(pins)) * (pins / 2 + 1)
}

/// One Walsh character `h`: the coefficients `r_k = c_h(k) mod M` of its series
/// for `k <= m = pins / 2`, computed incrementally so that a worker can report
/// progress, stop, checkpoint and resume.
///
/// From [`FAST_PINS`] pins on, the first [`Self::advance`] computes every
/// coefficient at once by the fast path (seconds even for the longest rows) and
/// later calls only reveal them; a cancelled fast computation keeps nothing.
/// Checkpoints look the same for both methods, and a prefix restored into a
/// fast series must agree with the fast result.
pub struct CharacterSeries {
    pins: u64,
    digits: u32,
    character: u32,
    bits: u32,
    target: usize,
    computed: usize,
    method: Method,
}

/// How a [`CharacterSeries`] computes its coefficients.
enum Method {
    /// The quadratic recurrences, one coefficient after another.
    Quadratic {
        /// Multiply-adds of one coefficient besides the root's `k / 2`.
        quotient_terms: u64,
        /// Quotient modulo `2^(b+1+d)`, root modulo `2^(b+d)`.
        two: Box<dyn Residues>,
        /// Quotient and root modulo `5^d`.
        five: Box<dyn Residues>,
    },
    /// All coefficients by the fast path: `known` holds them once computed, or
    /// the prefix restored from a checkpoint before that.
    Fast { known: Vec<u64> },
}

impl std::fmt::Debug for CharacterSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let method = match self.method {
            Method::Quadratic { .. } => "quadratic",
            Method::Fast { .. } => "fast",
        };
        f.debug_struct("CharacterSeries")
            .field("pins", &self.pins)
            .field("digits", &self.digits)
            .field("character", &self.character)
            .field("method", &method)
            .field("computed", &self.computed)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl CharacterSeries {
    /// Prepares character `character` of the job `(pins, digits)`; nothing is
    /// computed yet. The fast path serves rows of [`FAST_PINS`] pins or more.
    pub fn new(pins: u64, digits: u32, character: u32) -> Result<CharacterSeries> {
        if pins >= FAST_PINS {
            CharacterSeries::fast(pins, digits, character)
        } else {
            CharacterSeries::quadratic(pins, digits, character)
        }
    }

    /// The series computed by the quadratic recurrences, whatever the length.
    fn quadratic(pins: u64, digits: u32, character: u32) -> Result<CharacterSeries> {
        let mut series = CharacterSeries::empty(pins, digits, character)?;
        let pins_len = usize::try_from(pins).map_err(|_| invalid!("pins too large"))?;
        let grundy = grundy_values(pins_len);
        let fraction = rational::character_fraction(&grundy, character, series.target);
        let two = residues::two_adic(series.bits + 1 + digits, &fraction, series.target);
        let five = residues::five_adic(digits, &fraction, series.target);
        if (two.root_modulus(), five.root_modulus()) != series.factor_moduli() {
            return Err(Error::Internal(
                "kayles: residue moduli do not split M".into(),
            ));
        }
        series.method = Method::Quadratic {
            quotient_terms: fraction.den.len() as u64,
            two,
            five,
        };
        Ok(series)
    }

    /// The series computed by the fast path, whatever the length.
    fn fast(pins: u64, digits: u32, character: u32) -> Result<CharacterSeries> {
        CharacterSeries::empty(pins, digits, character)
    }

    /// A checked series with no coefficient, on the fast path until told
    /// otherwise.
    fn empty(pins: u64, digits: u32, character: u32) -> Result<CharacterSeries> {
        validate(pins, digits)?;
        let count = character_count(pins);
        if character >= count {
            return Err(invalid!(
                "character must be below {count} for {pins} pins, got {character}"
            ));
        }
        let target = usize::try_from(pins / 2 + 1).map_err(|_| invalid!("pins too large"))?;
        Ok(CharacterSeries {
            pins,
            digits,
            character,
            bits: grundy::bits_for_pins(pins),
            target,
            computed: 0,
            method: Method::Fast { known: Vec::new() },
        })
    }

    pub fn pins(&self) -> u64 {
        self.pins
    }

    pub fn digits(&self) -> u32 {
        self.digits
    }

    pub fn character(&self) -> u32 {
        self.character
    }

    /// The number of coefficients `r_0 .. r_{computed-1}` known.
    pub fn computed(&self) -> usize {
        self.computed
    }

    /// The number of coefficients of a finished series, `m + 1`.
    pub fn target(&self) -> usize {
        self.target
    }

    pub fn is_done(&self) -> bool {
        self.computed == self.target
    }

    /// The modulus `M = 2^b * 10^d` of the coefficients.
    pub fn modulus(&self) -> u128 {
        (1u128 << self.bits) * 10u128.pow(self.digits)
    }

    /// The coprime factors `2^(b+d)` and `5^d` of `M`.
    fn factor_moduli(&self) -> (u64, u64) {
        (1u64 << (self.bits + self.digits), 5u64.pow(self.digits))
    }

    /// Computes coefficients until `upto` (clamped to [`Self::target`]) are known,
    /// adding one work unit per coefficient to `control` and stopping with
    /// `Err(Cancelled)` when it is cancelled; the coefficients computed so far
    /// stay valid, so the series can be checkpointed or advanced again.
    pub fn advance(&mut self, upto: usize, control: &Control) -> Result<()> {
        let end = upto.min(self.target);
        if self.computed >= end {
            return Ok(());
        }
        control.check()?;
        match &mut self.method {
            Method::Quadratic {
                quotient_terms,
                two,
                five,
            } => {
                let mut reported = self.computed;
                let mut work = 0u64;
                while self.computed < end {
                    let k = self.computed;
                    two.step(k)?;
                    five.step(k)?;
                    self.computed += 1;
                    work += k as u64 / 2 + *quotient_terms;
                    if work >= POLL_WORK {
                        control.add_work((self.computed - reported) as u64);
                        reported = self.computed;
                        work = 0;
                        control.check()?;
                    }
                }
                control.add_work((self.computed - reported) as u64);
            }
            Method::Fast { known } => {
                if known.len() < end {
                    let plan = fast::FastPlan::new(self.pins, self.digits, 1)?;
                    let all = plan.coefficients(self.character, control, &mut |_| {})?;
                    if all[..known.len()] != known[..] {
                        return Err(Error::Internal(
                            "kayles: the checkpointed coefficients disagree with the series".into(),
                        ));
                    }
                    *known = all;
                }
                control.add_work((end - self.computed) as u64);
                self.computed = end;
            }
        }
        Ok(())
    }

    /// `c_h(k) mod M` for a computed coefficient `k`.
    pub fn coefficient(&self, k: usize) -> Option<u128> {
        if k >= self.computed {
            return None;
        }
        match &self.method {
            Method::Quadratic { two, five, .. } => {
                let (two_modulus, five_modulus) = self.factor_moduli();
                let crt = Crt::new(two_modulus, five_modulus).ok()?;
                Some(u128::from(crt.join(two.root(k), five.root(k))))
            }
            Method::Fast { known } => known.get(k).map(|&v| u128::from(v)),
        }
    }

    /// `c_h(m) mod M = 2^b * 10^d` once the series is done.
    pub fn value(&self) -> Option<u128> {
        if self.is_done() {
            self.coefficient(self.target - 1)
        } else {
            None
        }
    }

    /// The residues of coefficient `k` modulo `2^(b+d)` and `5^d`.
    fn residue_pair(&self, k: usize) -> (u64, u64) {
        let (two_modulus, five_modulus) = self.factor_moduli();
        match &self.method {
            Method::Quadratic { two, five, .. } => (two.root(k), five.root(k)),
            Method::Fast { known } => (known[k] % two_modulus, known[k] % five_modulus),
        }
    }

    /// The resumable state: the parameters, the root coefficients computed so
    /// far (both residues) and a checksum. The quotient is recomputed on restore.
    pub fn checkpoint(&self) -> Vec<u64> {
        let mut words = Vec::with_capacity(CHECKPOINT_HEADER + 2 * self.computed + 1);
        words.extend([
            CHECKPOINT_MAGIC,
            self.pins,
            u64::from(self.digits),
            u64::from(self.character),
            u64::from(self.bits),
            self.computed as u64,
        ]);
        for k in 0..self.computed {
            let (a, c) = self.residue_pair(k);
            words.push(a);
            words.push(c);
        }
        words.push(checksum(&words));
        words
    }

    /// Rebuilds a series from [`Self::checkpoint`], refusing a checkpoint of
    /// other parameters, a truncated or altered one, with `InvalidArgument`.
    pub fn restore(
        pins: u64,
        digits: u32,
        character: u32,
        checkpoint: &[u64],
    ) -> Result<CharacterSeries> {
        let series = CharacterSeries::new(pins, digits, character)?;
        series.restored(checkpoint)
    }

    /// This fresh series advanced to the state of `checkpoint`.
    fn restored(mut self, checkpoint: &[u64]) -> Result<CharacterSeries> {
        let (pins, digits, character) = (self.pins, self.digits, self.character);
        let Some((&sum, words)) = checkpoint.split_last() else {
            return Err(invalid!("kayles checkpoint is empty"));
        };
        if words.len() < CHECKPOINT_HEADER || words[0] != CHECKPOINT_MAGIC {
            return Err(invalid!("not a kayles checkpoint"));
        }
        let expected = [
            pins,
            u64::from(digits),
            u64::from(character),
            u64::from(self.bits),
        ];
        if words[1..5] != expected {
            return Err(invalid!(
                "kayles checkpoint is for pins {}, digits {}, character {}, not pins {pins}, \
                 digits {digits}, character {character}",
                words[1],
                words[2],
                words[3]
            ));
        }
        let computed = words[5];
        if computed > self.target as u64
            || words.len() as u64 != CHECKPOINT_HEADER as u64 + 2 * computed
        {
            return Err(invalid!(
                "kayles checkpoint is truncated or has a bad length ({} words for {computed} coefficients)",
                checkpoint.len()
            ));
        }
        if checksum(words) != sum {
            return Err(invalid!("kayles checkpoint checksum mismatch"));
        }
        let (two_modulus, five_modulus) = self.factor_moduli();
        let crt = Crt::new(two_modulus, five_modulus)?;
        let roots = &words[CHECKPOINT_HEADER..];
        for (k, pair) in roots.chunks_exact(2).enumerate() {
            let (a, c) = (pair[0], pair[1]);
            if a >= two_modulus || c >= five_modulus || (k == 0 && (a, c) != (1, 1)) {
                return Err(invalid!("kayles checkpoint has an invalid coefficient {k}"));
            }
            match &mut self.method {
                Method::Quadratic { two, five, .. } => {
                    two.quotient(k);
                    five.quotient(k);
                    two.set_root(k, a);
                    five.set_root(k, c);
                }
                Method::Fast { known } => known.push(crt.join(a, c)),
            }
        }
        self.computed = computed as usize;
        Ok(self)
    }
}

/// Joins residues modulo coprime `m` and `n`, `m n < 2^64`, into one modulo
/// `m n`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Crt {
    m: u64,
    n: u64,
    /// `m^-1 mod n`.
    m_inverse: u64,
}

impl Crt {
    pub(super) fn new(m: u64, n: u64) -> Result<Crt> {
        let m_inverse = inv_mod(m % n, n)
            .filter(|_| m.checked_mul(n).is_some())
            .ok_or_else(|| Error::Internal("kayles: CRT moduli not coprime".into()))?;
        Ok(Crt { m, n, m_inverse })
    }

    /// `x mod m n` from `a = x mod m` and `c = x mod n`.
    pub(super) fn join(&self, a: u64, c: u64) -> u64 {
        // x = a + m t with t = (c - a) / m mod n.
        let diff = (c + self.n - a % self.n) % self.n;
        let t = mul_mod(diff, self.m_inverse, self.n);
        a + self.m * t
    }
}

/// A 64-bit mixing checksum of checkpoint words.
fn checksum(words: &[u64]) -> u64 {
    words.iter().fold(0x243f_6a88_85a3_08d3, |h, &w| {
        (h.rotate_left(23) ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    })
}

/// `f(pins) mod 10^d` from the values `c_h(m) mod M` of all characters, in
/// character order.
pub fn combine(pins: u64, digits: u32, character_values: &[u128]) -> Result<u64> {
    validate(pins, digits)?;
    let count = character_count(pins);
    let modulus = character_modulus(pins, digits);
    if character_values.len() != count as usize {
        return Err(invalid!(
            "kayles needs {count} character values for {pins} pins, got {}",
            character_values.len()
        ));
    }
    if let Some(v) = character_values.iter().find(|&&v| v >= modulus) {
        return Err(invalid!(
            "character value {v} is not below the modulus {modulus}"
        ));
    }
    let sum = character_values
        .iter()
        .fold(0u128, |acc, &v| (acc + v) % modulus);
    if sum % u128::from(count) != 0 {
        return Err(Error::Internal(format!(
            "kayles: the character sum {sum} is not divisible by {count}"
        )));
    }
    Ok((sum / u128::from(count)) as u64)
}

/// From this many pins on, [`fair_rows`] and [`CharacterSeries`] take the fast
/// path: the measured crossover, below which the vectorised quadratic
/// recurrences are quicker than the transforms.
pub const FAST_PINS: u64 = 4_000;

/// `f(pins) mod 10^digits`, computing the characters on `threads` threads: by
/// [`fair_rows_fast`] from [`FAST_PINS`] pins on, by [`fair_rows_quadratic`]
/// below. Adds [`total_work`]`(pins)` work units in all.
pub fn fair_rows(pins: u64, digits: u32, threads: usize, control: &Control) -> Result<u64> {
    if pins >= FAST_PINS {
        fair_rows_fast(pins, digits, threads, control)
    } else {
        fair_rows_quadratic(pins, digits, threads, control)
    }
}

/// `f(pins) mod 10^digits` by the `O(n^2)` recurrences of [`CharacterSeries`]
/// (the independent check of the fast path), the characters shared among
/// `threads` threads.
pub fn fair_rows_quadratic(
    pins: u64,
    digits: u32,
    threads: usize,
    control: &Control,
) -> Result<u64> {
    validate(pins, digits)?;
    control.check()?;
    let values = character_values(character_count(pins), threads, |h| {
        let mut series = CharacterSeries::quadratic(pins, digits, h)?;
        series.advance(series.target(), control)?;
        series
            .value()
            .ok_or_else(|| Error::Internal("kayles: series not done".into()))
    })?;
    combine(pins, digits, &values)
}

/// `value(h)` for every character `h < count`, on up to `threads` threads that
/// take the characters in turn. The first error stops the others; an internal
/// error outranks the cancellation it may have raced with.
fn character_values(
    count: u32,
    threads: usize,
    value: impl Fn(u32) -> Result<u128> + Sync,
) -> Result<Vec<u128>> {
    let count = count as usize;
    let values: Vec<Mutex<Option<u128>>> = (0..count).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let work = || -> Result<()> {
        while !failed.load(Ordering::Relaxed) {
            let h = next.fetch_add(1, Ordering::Relaxed);
            if h >= count {
                break;
            }
            match value(h as u32) {
                Ok(v) => *values[h].lock() = Some(v),
                Err(e) => {
                    failed.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(())
    };
    let threads = threads.clamp(1, count.max(1));
    let outcomes: Vec<Result<()>> = if threads == 1 {
        vec![work()]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads).map(|_| scope.spawn(work)).collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        })
    };
    let mut errors: Vec<Error> = outcomes.into_iter().filter_map(|r| r.err()).collect();
    errors.sort_by_key(|e| matches!(e, Error::Cancelled));
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    values
        .into_iter()
        .map(Mutex::into_inner)
        .collect::<Option<_>>()
        .ok_or_else(|| Error::Internal("kayles: a character was not computed".into()))
}

/// The answer as its last `digits` digits, zero-padded.
pub fn format_answer(value: u64, digits: u32) -> String {
    format!("{value:0width$}", width = digits as usize)
}
