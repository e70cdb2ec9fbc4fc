//! A hex job's answer from its partials: the checks of reported residues
//! and evaluations, and the counts solved for, modulo a prime or exactly.

use crate::kind::Answer;
use crate::{Error, Result, invalid};
use tally_kernels::hex;

use super::{HexFacts, HexPartial, HexSpec};

pub(super) fn check_crossing_sums(h: &HexSpec, facts: &HexFacts, residues: &[u32]) -> Result<()> {
    let stride = facts.stride as usize;
    if residues.len() != stride {
        return Err(invalid!(
            "crossing sums have {} residues, expected {stride}",
            residues.len()
        ));
    }
    if residues.iter().any(|&r| r >= h.modulus) {
        return Err(invalid!(
            "crossing sums must be residues modulo {}",
            h.modulus
        ));
    }
    Ok(())
}

pub(super) fn check_evaluations(
    modulus: u32,
    points: &[u32],
    reported_modulus: u32,
    evaluations: &[(u32, u32)],
) -> Result<()> {
    let xs: Vec<u32> = evaluations.iter().map(|(x, _)| *x).collect();
    if reported_modulus != modulus || xs != points {
        return Err(invalid!(
            "evaluations at {xs:?} modulo {reported_modulus} reported on the shard of points {points:?} modulo {modulus}"
        ));
    }
    if evaluations.iter().any(|&(_, v)| v >= modulus) {
        return Err(invalid!("evaluations must be residues modulo {modulus}"));
    }
    Ok(())
}

pub(super) fn finish_cell_step(
    h: &HexSpec,
    facts: &HexFacts,
    partials: Vec<HexPartial>,
) -> Result<Answer> {
    let p = h.modulus as u64;
    let mut crossings = vec![0u64; facts.stride as usize];
    for partial in partials {
        let HexPartial::HexCrossings { residues } = partial else {
            return Err(Error::Internal("hex job with a foreign partial".into()));
        };
        if residues.len() != crossings.len() {
            return Err(Error::Internal("hex partial of the wrong length".into()));
        }
        for (c, r) in crossings.iter_mut().zip(residues) {
            *c = (*c + r as u64) % p;
        }
    }
    let crossings: Vec<u32> = crossings.into_iter().map(|c| c as u32).collect();
    Ok(residue_answer(h, facts, &crossings))
}

/// Solves each prime's evaluations for the crossing counts, checks them at the
/// point not used to solve, and computes H(N) modulo the prime or, with several
/// primes, exactly.
pub(super) fn finish_points(
    h: &HexSpec,
    facts: &HexFacts,
    partials: Vec<HexPartial>,
) -> Result<Answer> {
    let mut per_prime: Vec<Vec<(u32, u32)>> = vec![Vec::new(); facts.primes.len()];
    for partial in partials {
        let HexPartial::HexEvaluations {
            modulus,
            evaluations,
        } = partial
        else {
            return Err(Error::Internal(
                "hex points job with a foreign partial".into(),
            ));
        };
        let i = facts
            .primes
            .iter()
            .position(|&p| p == modulus)
            .ok_or_else(|| {
                Error::Internal(format!(
                    "evaluations modulo {modulus}, not a prime of the job"
                ))
            })?;
        per_prime[i].extend_from_slice(&evaluations);
    }
    let crossings: Vec<Vec<u32>> = facts
        .primes
        .iter()
        .zip(&per_prime)
        .map(|(&p, evaluations)| hex::solve_crossings(h.side, p, evaluations))
        .collect::<Result<_>>()?;
    if h.exact {
        exact_answer(h, facts, &crossings)
    } else {
        Ok(residue_answer(h, facts, &crossings[0]))
    }
}

pub(super) fn exact_answer(
    h: &HexSpec,
    facts: &HexFacts,
    crossings: &[Vec<u32>],
) -> Result<Answer> {
    let half = (h.side * h.side / 2) as usize;
    let exact = hex::exact_crossings(h.side, &facts.primes, crossings)?;
    let games = hex::exact_game_count(h.side, &exact);
    let modulus = hex::DEFAULT_MODULUS;
    let residues: Vec<u32> = exact[..=half]
        .iter()
        .map(|c| (c % modulus).try_into().expect("a residue fits"))
        .collect();
    Ok(Answer {
        line: games.to_string(),
        details: serde_json::json!({
            "kind": "hex",
            "side": h.side,
            "plan": h.plan.name(),
            "exact": true,
            "primes": facts.primes,
            "games": games.to_string(),
            "games_mod_1000000007": hex::game_count(h.side, &residues, modulus),
            "crossings": exact.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
        }),
    })
}

/// H(N) mod p from crossing counts mod p: C_0..C_(M/2) at least (the points plan
/// has all of them, the cell-step plan the lower half).
pub(super) fn residue_answer(h: &HexSpec, facts: &HexFacts, crossings: &[u32]) -> Answer {
    let half = (h.side * h.side / 2) as usize;
    let games = hex::game_count(h.side, &crossings[..=half], h.modulus);
    Answer {
        line: games.to_string(),
        details: serde_json::json!({
            "kind": "hex",
            "side": h.side,
            "modulus": h.modulus,
            "plan": h.plan.name(),
            "states": facts.states,
            "games_mod": games,
            "crossings_mod": crossings,
        }),
    }
}
