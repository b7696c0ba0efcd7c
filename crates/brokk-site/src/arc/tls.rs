//! The TLS client of the ARC backend: rustls with the ring provider plus the
//! secp521r1 key exchange, which ring lacks and A-REX insists on: it offers
//! one ECDH curve, secp521r1 unless its operator sets `tlscurve`, and ARC's
//! own clients ask for that curve only, so a CE cannot simply be switched to
//! a common one. The exchange is RustCrypto's `p521`.

use std::sync::Arc;

use p521::elliptic_curve::sec1::ToEncodedPoint;
use rustls::crypto::{ActiveKeyExchange, CryptoProvider, SharedSecret, SupportedKxGroup};
use rustls::{NamedGroup, PeerMisbehaved};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// ECDHE over secp521r1.
#[derive(Debug)]
struct Secp521r1;

static SECP521R1: Secp521r1 = Secp521r1;

impl SupportedKxGroup for Secp521r1 {
    fn start(&self) -> Result<Box<dyn ActiveKeyExchange>, rustls::Error> {
        let secret = p521::ecdh::EphemeralSecret::random(&mut rand_core::OsRng);
        let public = secret.public_key().to_encoded_point(false).as_bytes().to_vec();
        Ok(Box::new(Exchange { secret, public }))
    }

    fn name(&self) -> NamedGroup {
        NamedGroup::secp521r1
    }
}

/// One exchange in progress: our ephemeral secret and its public point.
struct Exchange {
    secret: p521::ecdh::EphemeralSecret,
    public: Vec<u8>,
}

impl ActiveKeyExchange for Exchange {
    fn complete(self: Box<Self>, peer: &[u8]) -> Result<SharedSecret, rustls::Error> {
        let peer = p521::PublicKey::from_sec1_bytes(peer).map_err(|_| PeerMisbehaved::InvalidKeyShare)?;
        let shared = self.secret.diffie_hellman(&peer);
        Ok(SharedSecret::from(&shared.raw_secret_bytes()[..]))
    }

    fn pub_key(&self) -> &[u8] {
        &self.public
    }

    fn group(&self) -> NamedGroup {
        NamedGroup::secp521r1
    }
}

/// The client configuration: the CA certificates in PEM (`cas`), the client
/// certificate chain and key in PEM (`identity`: a certificate and its key,
/// or a proxy with its key inside).
pub fn client_config(cas: &[Vec<u8>], identity: &[u8]) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    for pem in cas {
        for cert in CertificateDer::pem_slice_iter(pem).flatten() {
            roots.add(cert).map_err(|e| format!("a CA certificate: {e}"))?;
        }
    }
    if roots.is_empty() {
        return Err("no CA certificate".into());
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(identity)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the certificate: {e}"))?;
    if chain.is_empty() {
        return Err("no certificate in the PEM".into());
    }
    let key = PrivateKeyDer::from_pem_slice(identity).map_err(|e| format!("the key: {e}"))?;
    let mut provider = rustls::crypto::ring::default_provider();
    provider.kx_groups.push(&SECP521R1);
    rustls::ClientConfig::builder_with_provider(Arc::new(provider) as Arc<CryptoProvider>)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| format!("the certificate and key: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_of_an_exchange_agree() {
        let a = SECP521R1.start().unwrap();
        let b = SECP521R1.start().unwrap();
        let b_public = b.pub_key().to_vec();
        let a_public = a.pub_key().to_vec();
        // An uncompressed P-521 point: 0x04 and two 66-byte coordinates.
        assert_eq!(a_public.len(), 133);
        let x = a.complete(&b_public).unwrap();
        let y = b.complete(&a_public).unwrap();
        assert_eq!(x.secret_bytes(), y.secret_bytes());
        assert!(SECP521R1.start().unwrap().complete(&[4, 1, 2]).is_err());
    }
}
