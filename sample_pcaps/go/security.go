package main

// TLS and SASL/SCRAM for both libraries, for the SSL and SASL_SSL listeners of a real broker.
//
// TLS is made by the dialer hook that also logs the requests (Tap.Dial), with crypto/tls and a KeyLogWriter
// appending the session secrets to an NSS key log. Both libraries would otherwise wrap the hook's connection
// in tls.Client themselves (kgo.DialTLSConfig, sarama's Net.TLS), and the request log would then see only
// ciphertext; the handshake is the same crypto/tls one either way. SCRAM is franz-go's pkg/sasl/scram, for
// sarama too through its SCRAMClient interface, so no second SCRAM implementation enters the module.
//
// The password comes from the environment (PasswordEnv), never from the command line, and is printed nowhere.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// PasswordEnv holds the SCRAM password of -sasl-user.
const PasswordEnv = "KAFKACAP_SASL_PASSWORD"

// wrongPassword is what the -auth-failure-probe client offers instead: any other string would do.
const wrongPassword = "not-the-password"

type securityOptions struct {
	caFile     string
	keyLog     string
	tlsMax     string
	tlsCipher  string
	saslUser   string
	mechanism  string
	authProbe  bool
	password   string
	tls        *tls.Config
	keyLogFile io.Closer
}

func (s *securityOptions) register(flags *flag.FlagSet) {
	flags.StringVar(&s.caFile, "tls-ca", "", "connect with TLS, trusting this PEM certificate (empty: plaintext)")
	flags.StringVar(&s.keyLog, "tls-keylog", "", "append the TLS session secrets to this NSS key log")
	flags.StringVar(&s.tlsMax, "tls-max", "1.3", "highest TLS version offered: 1.2 or 1.3")
	flags.StringVar(&s.tlsCipher, "tls-cipher", "", "the one TLS 1.2 cipher suite offered (Go's name for it)")
	flags.StringVar(&s.saslUser, "sasl-user", "", "authenticate as this user (password in $"+PasswordEnv+")")
	flags.StringVar(&s.mechanism, "sasl-mechanism", "SCRAM-SHA-512", "SCRAM-SHA-256 or SCRAM-SHA-512")
	flags.BoolVar(&s.authProbe, "auth-failure-probe", false, "franz-go: first let a client with a wrong password be "+
		"refused (SASL_AUTHENTICATION_FAILED)")
}

// load reads the certificate, opens the key log and the password; call Close when done.
func (s *securityOptions) load() error {
	if s.saslUser != "" {
		s.password = os.Getenv(PasswordEnv)
		if s.password == "" {
			return fmt.Errorf("-sasl-user needs the password in $%s", PasswordEnv)
		}
		if s.mechanism != "SCRAM-SHA-256" && s.mechanism != "SCRAM-SHA-512" {
			return fmt.Errorf("unsupported -sasl-mechanism %q", s.mechanism)
		}
	}
	if s.authProbe && s.saslUser == "" {
		return errors.New("-auth-failure-probe needs -sasl-user")
	}
	if s.caFile == "" {
		if s.keyLog != "" || s.tlsCipher != "" {
			return errors.New("-tls-keylog and -tls-cipher need -tls-ca")
		}
		return nil
	}
	pem, err := os.ReadFile(s.caFile)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return fmt.Errorf("%s: no PEM certificate", s.caFile)
	}
	config := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	switch s.tlsMax {
	case "1.3":
	case "1.2":
		config.MaxVersion = tls.VersionTLS12
	default:
		return fmt.Errorf("-tls-max %q: want 1.2 or 1.3", s.tlsMax)
	}
	if s.tlsCipher != "" {
		index := slices.IndexFunc(tls.CipherSuites(), func(c *tls.CipherSuite) bool { return c.Name == s.tlsCipher })
		if index < 0 {
			return fmt.Errorf("-tls-cipher %q: not a cipher suite crypto/tls offers", s.tlsCipher)
		}
		config.CipherSuites = []uint16{tls.CipherSuites()[index].ID}
	}
	if s.keyLog != "" {
		file, err := os.OpenFile(s.keyLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		config.KeyLogWriter = file
		s.keyLogFile = file
	}
	s.tls = config
	return nil
}

func (s *securityOptions) Close() {
	if s.keyLogFile != nil {
		s.keyLogFile.Close()
	}
}

// describe says what the run used, for the output's checks (nothing secret).
func (s *securityOptions) describe(out *Output) {
	if s.tls != nil {
		out.Checks["tls_max_version"] = s.tlsMax
		if s.tlsCipher != "" {
			out.Checks["tls_cipher"] = s.tlsCipher
		}
		out.Checks["tls_keylog"] = s.keyLog != ""
	}
	if s.saslUser != "" {
		out.Checks["sasl_mechanism"] = s.mechanism
	}
}

// tlsClient completes a TLS handshake over a dialed connection, naming the broker's host as the server (an IP
// address is checked against the certificate's IP SANs and sent as no SNI, as the libraries themselves do).
func tlsClient(ctx context.Context, conn net.Conn, config *tls.Config, address string) (*tls.Conn, error) {
	config = config.Clone()
	if config.ServerName == "" {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			host = address
		}
		config.ServerName = host
	}
	client := tls.Client(conn, config)
	if err := client.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return client, nil
}

func (s *securityOptions) scramMechanism(password string) sasl.Mechanism {
	auth := scram.Auth{User: s.saslUser, Pass: password}
	if s.mechanism == "SCRAM-SHA-256" {
		return auth.AsSha256Mechanism()
	}
	return auth.AsSha512Mechanism()
}

// franzSASL: the client options that make franz-go authenticate (none without -sasl-user).
func (s *securityOptions) franzSASL() []kgo.Opt {
	if s.saslUser == "" {
		return nil
	}
	return []kgo.Opt{kgo.SASL(s.scramMechanism(s.password))}
}

// AuthProbe is the outcome of the -auth-failure-probe client.
type AuthProbe struct {
	ClientID string `json:"client_id"`
	Refused  bool   `json:"refused"`
	Error    string `json:"error"`
}

// franzAuthProbe has one client with the wrong password ask for metadata once: the broker must refuse the
// SCRAM exchange. franz-go retries a refused authentication once on a new connection, so the request log shows
// one or two SaslAuthenticate responses with SASL_AUTHENTICATION_FAILED.
func franzAuthProbe(ctx context.Context, base []kgo.Opt, clientID string, s *securityOptions, out *Output) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	opts := append(slices.Clone(base), kgo.SASL(s.scramMechanism(wrongPassword)), kgo.RequestRetries(0))
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, client)
	client.Close()
	probe := &AuthProbe{ClientID: clientID, Refused: errors.Is(err, kerr.SaslAuthenticationFailed)}
	if err != nil {
		probe.Error = err.Error()
	}
	out.AuthProbe = probe
	if !probe.Refused {
		return fmt.Errorf("%s: the wrong password was not refused (%v)", clientID, err)
	}
	return nil
}

// saramaSCRAM adapts a franz-go SCRAM session to sarama's SCRAMClient.
type saramaSCRAM struct {
	mechanism sasl.Mechanism
	session   sasl.Session
	first     []byte
	done      bool
}

func (c *saramaSCRAM) Begin(_, _, _ string) error {
	session, first, err := c.mechanism.Authenticate(context.Background(), "")
	c.session, c.first = session, first
	return err
}

func (c *saramaSCRAM) Step(challenge string) (string, error) {
	if c.first != nil {
		first := c.first
		c.first = nil
		return string(first), nil
	}
	done, response, err := c.session.Challenge([]byte(challenge))
	c.done = done
	return string(response), err
}

func (c *saramaSCRAM) Done() bool { return c.done }

// saramaSASL makes a sarama config authenticate with SaslHandshake v1 and SaslAuthenticate (none without
// -sasl-user). User and password are sarama's own settings; the SCRAM client is franz-go's.
func (s *securityOptions) saramaSASL(config *sarama.Config) {
	if s.saslUser == "" {
		return
	}
	config.Net.SASL.Enable = true
	config.Net.SASL.Version = sarama.SASLHandshakeV1
	config.Net.SASL.User = s.saslUser
	config.Net.SASL.Password = s.password
	config.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
	if s.mechanism == "SCRAM-SHA-256" {
		config.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA256
	}
	password := s.password
	config.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient {
		return &saramaSCRAM{mechanism: s.scramMechanism(password)}
	}
}
