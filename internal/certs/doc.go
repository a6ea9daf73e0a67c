// Package certs is berth's certificate handling, in one place: it issues small X.509
// hierarchies (ECDSA P-256, PEM) for the local rig and tests, keeps the pod-gate webhook's
// self-managed CA and serving certificate valid and injected (Rotator, on
// open-policy-agent/cert-controller), and exports when
// the serving certificate expires (berth_webhook_certificate_expiry_timestamp_seconds), and
// serves certificate files that are re-read when they rotate (ServingFiles: the scaler's TLS).
package certs
