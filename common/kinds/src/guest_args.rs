//! The flags of every kind of user kernel (`wasm`, `wasm-sweep`), in one
//! place: the module, its parameters, and the primes the answer is kept
//! modulo.

use crate::Result;

/// The flags of every kind of user kernel (`wasm`, `wasm-sweep`): the
/// module, its parameters, and the primes the answer is kept modulo.
#[derive(clap::Args, Debug)]
pub struct GuestArgs {
    /// The module, a .wasm file of at most 8 MiB; it is sent with the job.
    #[arg(long, value_name = "FILE")]
    pub module: std::path::PathBuf,
    /// A parameter for the module; repeat for more (the module reads them).
    #[arg(long = "param", value_name = "K=V")]
    pub params: Vec<String>,
    /// The prime the answer is taken modulo, below 2^62 [default: 1000000007].
    #[arg(long, conflicts_with = "exact")]
    pub modulus: Option<u64>,
    /// The exact answer: kept modulo as many primes below 2^62 as
    /// --bound-bits needs, and a spare, joined by the CRT.
    #[arg(long, requires = "bound_bits")]
    pub exact: bool,
    /// With --exact: every value of the answer is below 2^B, 1 to 4096.
    #[arg(long, value_name = "B", requires = "exact")]
    pub bound_bits: Option<u32>,
}

/// [`GuestArgs`] as a spec takes them.
pub struct GuestSpecParts {
    pub module_sha256: String,
    pub params: Vec<String>,
    pub modulus: u64,
    pub exact: bool,
    pub bound_bits: u32,
}

impl GuestArgs {
    /// The module attached to the job (its digest), the parameters, and the
    /// modulus or bound.
    pub fn into_parts(self, files: &dyn crate::kind::FileReader) -> Result<GuestSpecParts> {
        let (modulus, bound_bits) =
            crate::exact::modulus_and_bound(self.exact, self.modulus, self.bound_bits);
        Ok(GuestSpecParts {
            module_sha256: files.attach(&self.module)?,
            params: self.params,
            modulus,
            exact: self.exact,
            bound_bits,
        })
    }
}
