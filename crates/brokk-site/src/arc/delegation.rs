//! Delegation to A-REX: the CE makes a key pair and sends its public half as
//! a certificate request; the client signs it into an RFC 3820 proxy
//! certificate of its own identity and sends it back with its chain. A-REX
//! then acts as the job's owner where the job's data lives (a GridFTP
//! server that maps the owner's name, not the CE's), as `arcsub` arranges
//! for every job.
//!
//! The proxy is what ARC's own client issues: the signer's subject with one
//! more `CN` (the serial number), `proxyCertInfo` inheriting all rights,
//! digital signature and key encipherment, valid from five minutes ago (for
//! clocks that differ) until the signer's own end.

use std::time::{Duration, SystemTime};

use base64::Engine;
use rsa::pkcs1::DecodeRsaPrivateKey;
use rsa::pkcs1v15::{Signature, SigningKey};
use rsa::pkcs8::DecodePrivateKey;
use rsa::rand_core::{OsRng, RngCore};
use rsa::RsaPrivateKey;
use sha2::Sha256;
use x509_cert::builder::{Builder, CertificateBuilder, Profile};
use x509_cert::der::asn1::ObjectIdentifier;
use x509_cert::der::{Any, Decode, DecodePem, Encode, EncodePem, Length, Reader, SliceReader, Writer};
use x509_cert::ext::pkix::{KeyUsage, KeyUsages};
use x509_cert::ext::AsExtension;
use x509_cert::name::{Name, RdnSequence};
use x509_cert::serial_number::SerialNumber;
use x509_cert::spki::SubjectPublicKeyInfoOwned;
use x509_cert::time::{Time, Validity};
use x509_cert::Certificate;

/// How far before now a proxy starts: the CE's clock may be behind ours.
const CLOCK_SLACK: Duration = Duration::from_secs(300);

/// The `proxyCertInfo` extension (RFC 3820 3.8) of an unrestricted proxy:
/// no path length limit, policy language `id-ppl-inheritAll`.
struct InheritAll;

impl InheritAll {
    /// `SEQUENCE { SEQUENCE { OBJECT IDENTIFIER 1.3.6.1.5.5.7.21.1 } }`.
    const DER: [u8; 14] = [
        0x30, 0x0c, 0x30, 0x0a, 0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x15, 0x01,
    ];
}

impl x509_cert::der::oid::AssociatedOid for InheritAll {
    const OID: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.1.14");
}

impl Encode for InheritAll {
    fn encoded_len(&self) -> x509_cert::der::Result<Length> {
        Length::try_from(Self::DER.len())
    }

    fn encode(&self, writer: &mut impl Writer) -> x509_cert::der::Result<()> {
        writer.write(&Self::DER)
    }
}

impl AsExtension for InheritAll {
    /// RFC 3820: a proxy's `proxyCertInfo` MUST be critical.
    fn critical(&self, _: &Name, _: &[x509_cert::ext::Extension]) -> bool {
        true
    }
}

/// An identity that can sign proxies: its certificate chain (the signer's
/// own first) and its RSA key.
pub struct Delegator {
    chain: Vec<Certificate>,
    key: RsaPrivateKey,
}

impl std::fmt::Debug for Delegator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a delegator of {} certificates", self.chain.len())
    }
}

/// The PEM blocks of `pem`, each with its label, in order.
fn blocks(pem: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = pem;
    while let Some(b) = rest.find("-----BEGIN ") {
        let after = &rest[b + 11..];
        let Some(label_end) = after.find("-----") else { break };
        let label = &after[..label_end];
        let end_line = format!("-----END {label}-----");
        let Some(e) = rest[b..].find(&end_line) else { break };
        let end = b + e + end_line.len();
        out.push((label, &rest[b..end]));
        rest = &rest[end..];
    }
    out
}

/// The public key of a PKCS #10 request, read without judging the rest:
/// A-REX writes its requests with version 2 where the standard knows only
/// 0 (1), which a strict reader refuses. The request comes over the TLS
/// connection to the CE this client authenticated, so its own signature is
/// not what vouches for it.
fn requested_key(der: &[u8]) -> x509_cert::der::Result<SubjectPublicKeyInfoOwned> {
    let mut reader = SliceReader::new(der)?;
    let key = reader.sequence(|request| {
        let key = request.sequence(|info| {
            let _version = Any::decode(info)?;
            let _subject = Any::decode(info)?;
            let key = SubjectPublicKeyInfoOwned::decode(info)?;
            while !info.is_finished() {
                Any::decode(info)?;
            }
            Ok(key)
        })?;
        let _algorithm = Any::decode(request)?;
        let _signature = Any::decode(request)?;
        Ok(key)
    })?;
    reader.finish(key)
}

impl Delegator {
    /// The identity in `pem`: certificates in chain order (the signer's
    /// first) and an unencrypted RSA key, in PKCS #8 or PKCS #1 form, as a
    /// certificate and key file or a proxy file hold them.
    pub fn from_pem(pem: &[u8]) -> Result<Delegator, String> {
        let text = std::str::from_utf8(pem).map_err(|_| "the credential is not PEM text".to_string())?;
        let mut chain = Vec::new();
        let mut key = None;
        for (label, block) in blocks(text) {
            match label {
                "CERTIFICATE" => chain.push(Certificate::from_pem(block).map_err(|e| format!("a certificate: {e}"))?),
                "PRIVATE KEY" => {
                    key = Some(
                        RsaPrivateKey::from_pkcs8_pem(block)
                            .map_err(|e| format!("the key (an RSA key in PKCS #8 is needed): {e}"))?,
                    )
                }
                "RSA PRIVATE KEY" => {
                    key = Some(RsaPrivateKey::from_pkcs1_pem(block).map_err(|e| format!("the RSA key: {e}"))?)
                }
                "ENCRYPTED PRIVATE KEY" => return Err("the key is encrypted; give it unencrypted, or a proxy".into()),
                _ => {}
            }
        }
        let key = key.ok_or("the credential holds no key")?;
        if chain.is_empty() {
            return Err("the credential holds no certificate".into());
        }
        Ok(Delegator { chain, key })
    }

    /// Signs the CE's certificate request `request` (PEM, or its bare
    /// base64 body) at `now`: the proxy certificate followed by this
    /// identity's chain, in PEM, as A-REX takes it back.
    pub fn sign(&self, request: &str, now: SystemTime) -> Result<String, String> {
        // As ARC's own client does: the body is read whatever its lines
        // and armour.
        let body: String = request
            .lines()
            .filter(|l| !l.trim_start().starts_with("-----"))
            .flat_map(|l| l.chars().filter(|c| !c.is_whitespace()))
            .collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .map_err(|e| format!("the CE's certificate request is not base64: {e}"))?;
        let key = requested_key(&der).map_err(|e| format!("the CE's certificate request: {e}"))?;
        let issuer = &self.chain[0].tbs_certificate;
        // A positive serial of 31 bits, which is also the proxy's own CN.
        let serial = OsRng.next_u32() >> 1;
        let mut subject: RdnSequence = issuer.subject.clone();
        let cn: RdnSequence = format!("CN={serial}")
            .parse()
            .map_err(|e| format!("the proxy's name: {e}"))?;
        subject.0.extend(cn.0);
        let start = now.checked_sub(CLOCK_SLACK).unwrap_or(now);
        let validity = Validity {
            not_before: Time::try_from(start).map_err(|e| format!("the proxy's start: {e}"))?,
            not_after: issuer.validity.not_after,
        };
        let signer = SigningKey::<Sha256>::new(self.key.clone());
        let mut builder = CertificateBuilder::new(
            Profile::Manual {
                issuer: Some(issuer.subject.clone()),
            },
            SerialNumber::new(&serial.to_be_bytes()).map_err(|e| e.to_string())?,
            validity,
            subject,
            key,
            &signer,
        )
        .map_err(|e| format!("the proxy: {e}"))?;
        builder
            .add_extension(&KeyUsage(KeyUsages::DigitalSignature | KeyUsages::KeyEncipherment))
            .and_then(|()| builder.add_extension(&InheritAll))
            .map_err(|e| format!("the proxy's extensions: {e}"))?;
        let proxy = builder
            .build_with_rng::<Signature>(&mut OsRng)
            .map_err(|e| format!("signing the proxy: {e}"))?;
        let mut out = String::new();
        for cert in std::iter::once(&proxy).chain(&self.chain) {
            out.push_str(
                &cert
                    .to_pem(x509_cert::der::pem::LineEnding::LF)
                    .map_err(|e| e.to_string())?,
            );
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsa::pkcs1v15::VerifyingKey;
    use rsa::pkcs8::{EncodePrivateKey, LineEnding};
    use rsa::signature::Verifier;
    use x509_cert::builder::RequestBuilder;
    use x509_cert::spki::SubjectPublicKeyInfoOwned;

    fn key() -> RsaPrivateKey {
        RsaPrivateKey::new(&mut OsRng, 1024).unwrap()
    }

    /// A certificate for `subject`'s `key`, signed by `by` in the name of
    /// `issuer`.
    fn certificate(profile: Profile, subject: &str, key: &RsaPrivateKey, by: &RsaPrivateKey) -> Certificate {
        let now = SystemTime::now();
        let validity = Validity {
            not_before: Time::try_from(now - Duration::from_secs(60)).unwrap(),
            not_after: Time::try_from(now + Duration::from_secs(86_400)).unwrap(),
        };
        let spki = SubjectPublicKeyInfoOwned::from_key(key.to_public_key()).unwrap();
        let signer = SigningKey::<Sha256>::new(by.clone());
        CertificateBuilder::new(
            profile,
            SerialNumber::from(7u32),
            validity,
            subject.parse().unwrap(),
            spki,
            &signer,
        )
        .unwrap()
        .build::<Signature>()
        .unwrap()
    }

    #[test]
    fn a_request_is_signed_into_an_rfc_3820_proxy_of_the_users_name() {
        let (ca_key, user_key) = (key(), key());
        let ca = certificate(Profile::Root, "O=Test,CN=Test CA", &ca_key, &ca_key);
        let user = certificate(
            Profile::Leaf {
                issuer: ca.tbs_certificate.subject.clone(),
                enable_key_agreement: false,
                enable_key_encipherment: true,
                include_subject_key_identifier: true,
            },
            "DC=org,DC=example,O=Grid,CN=Ann User",
            &user_key,
            &ca_key,
        );
        // The user's file: certificate, then key, as `arcproxy` reads them.
        let pem = format!(
            "{}{}",
            user.to_pem(LineEnding::LF).unwrap(),
            user_key.to_pkcs8_pem(LineEnding::LF).unwrap().as_str()
        );
        let delegator = Delegator::from_pem(pem.as_bytes()).unwrap();
        assert_eq!(
            delegator.chain,
            std::slice::from_ref(&user),
            "the key is not a certificate"
        );
        // The CE's request, for a key only the CE holds (here the CA's).
        let ce_signer = SigningKey::<Sha256>::new(ca_key.clone());
        let request = RequestBuilder::new("CN=ignored".parse().unwrap(), &ce_signer)
            .unwrap()
            .build::<Signature>()
            .unwrap();
        let body = request.to_pem(LineEnding::LF).unwrap();
        // A-REX may send the bare base64 body; both are read.
        let bare: String = body.lines().filter(|l| !l.starts_with("-----")).collect();
        for asked in [body.clone(), bare] {
            let answer = delegator.sign(&asked, SystemTime::now()).unwrap();
            let chain = Certificate::load_pem_chain(answer.as_bytes()).unwrap();
            assert_eq!(chain.len(), 2, "the proxy, then the user's certificate");
            assert_eq!(chain[1], user);
            let proxy = &chain[0].tbs_certificate;
            assert_eq!(proxy.issuer, user.tbs_certificate.subject);
            // The user's name and one CN more: the serial number.
            let serial = u32::from_be_bytes(proxy.serial_number.as_bytes().try_into().unwrap());
            let (last, first) = proxy.subject.0.split_last().unwrap();
            assert_eq!(first, &user.tbs_certificate.subject.0[..]);
            assert_eq!(RdnSequence(vec![last.clone()]).to_string(), format!("CN={serial}"));
            // The CE's key, not ours.
            assert_eq!(proxy.subject_public_key_info, request.info.public_key);
            assert_eq!(proxy.validity.not_after, user.tbs_certificate.validity.not_after);
            let exts = proxy.extensions.as_ref().unwrap();
            let pci = exts
                .iter()
                .find(|e| e.extn_id.to_string() == "1.3.6.1.5.5.7.1.14")
                .expect("proxyCertInfo");
            assert!(pci.critical);
            assert_eq!(pci.extn_value.as_bytes(), InheritAll::DER);
            // Signed by the user's key.
            let tbs = proxy.to_der().unwrap();
            let sig = Signature::try_from(chain[0].signature.raw_bytes()).unwrap();
            VerifyingKey::<Sha256>::new(user_key.to_public_key())
                .verify(&tbs, &sig)
                .expect("the user's signature");
            assert!(Certificate::from_der(&chain[0].to_der().unwrap()).is_ok());
        }
    }

    /// A request as A-REX 6.17 wrote it (version 2, an empty subject).
    const AREX_REQUEST: &str = "-----BEGIN CERTIFICATE REQUEST-----\n\
MIICRTCCAS0CAQIwADCCASIwDQYJKoZIhvcNAQEBBQADggEPADCCAQoCggEBAMRk\n\
RnMS3dO/09uQb8HYcV6+4DP18JkKN5Lk4Yn/mllY8hRoSHKQJrWShvcLuGHUfemY\n\
N7FW08Qy8iKcKOwYFDWIehNj+qw+VRI/ve0jK/uQTyIibz56bYXyXojk3k6aMdJx\n\
nfaFx/6nWzGT1oZpxOwpOzZFzk2sB9bxCmiyilkOJJHxqgVyGbDMfCo0BwrJR0zt\n\
/0m6yK9ci1pDmWRzTbkkTLRH9Ja6zhym2FWRX3qk/IB8OExrORcomwz/lRMIF/1X\n\
gbOhuPz8L8T4AHDtt5i9gakOMHoLHZrrs6e607uyD867h2/IoTBodm3/W88iRvHG\n\
JSdsAaGkysjY73TkiMcCAwEAAaAAMA0GCSqGSIb3DQEBCwUAA4IBAQBNUBYI0gYw\n\
TKOL043P5xN8mpLQbmhjw52dqm68vDac4dJT+XcCw8Ok1s0qCWfIP2dynRtfgFyK\n\
Bemwt4nFZCZ4CKdxAUv9De8tgTLTrK1jEek0vPk1wKdanPYx/pibQH+LGJ8+XwBu\n\
vzDZWiLJheFMIR7+6KjC3f/ycBvfooXjuj8V745ODGoy6MAgJA+2hSwH5ejvj7Tg\n\
wrF+tln9agb8KWOLl2j76goVVY5iRZPAIpDe2aw/0mX2f3j2xH8aub1agHSOIIeU\n\
PY8H7Us5d0Hn4whpKkpLspfjwaQX4i//IHTvs2GL0pjfdgm9jZNvpliv19bOO4FJ\n\
OhPPZIxqfKpj\n\
-----END CERTIFICATE REQUEST-----";

    #[test]
    fn a_request_as_a_rex_writes_it_is_read() {
        let der = base64::engine::general_purpose::STANDARD
            .decode(
                AREX_REQUEST
                    .lines()
                    .filter(|l| !l.starts_with("-----"))
                    .collect::<String>(),
            )
            .unwrap();
        // A strict reader refuses it for its version.
        assert!(x509_cert::request::CertReq::from_der(&der).is_err());
        let key = requested_key(&der).unwrap();
        assert_eq!(key.algorithm.oid.to_string(), "1.2.840.113549.1.1.1");
        assert_eq!(key.subject_public_key.raw_bytes().len(), 270, "a 2048-bit RSA key");
    }

    #[test]
    fn a_credential_without_a_key_or_with_an_encrypted_one_says_so() {
        assert!(Delegator::from_pem(b"no pem here").unwrap_err().contains("no key"));
        let enc = "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n";
        assert!(Delegator::from_pem(enc.as_bytes()).unwrap_err().contains("encrypted"));
    }
}
