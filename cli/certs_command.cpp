#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "transport/certs.h"

namespace geoloco::cli {

namespace {
struct CertsArgs {
  std::string out;
  std::string ca;
  std::string site;
  std::string cert;
  std::string name = "geoloco federation";
  int days = 825;
  int crl_days = 30;
};

int report(const Status& s, const std::string& what) {
  if (s.ok()) {
    std::cout << what << '\n';
    return 0;
  }
  std::cerr << "geoloco certs: " << s.message() << '\n';
  return 1;
}
}  // namespace

void add_certs_command(CLI::App& app, Action& action) {
  auto* certs = app.add_subcommand("certs", "Create the federation CA and site certificates (EC P-256)");
  certs->require_subcommand(1);
  auto args = std::make_shared<CertsArgs>();

  auto* init = certs->add_subcommand("init", "Create a federation CA in --out (ca.pem, ca.key)");
  init->add_option("--out", args->out, "directory for the CA")->required();
  init->add_option("--name", args->name, "the CA's common name")->capture_default_str();
  init->add_option("--days", args->days, "validity in days")->capture_default_str();
  init->callback([&action, args] {
    action = [args] {
      transport::CertOptions o;
      o.days_valid = args->days;
      return report(transport::create_ca(args->out, args->name, o),
                    "created CA '" + args->name + "' in " + args->out + " (keep ca.key offline)");
    };
  });

  auto* issue = certs->add_subcommand(
      "issue",
      "Issue a site's key and certificate, signed by the CA; into a directory that has them, a renewal "
      "(the previous pair stays as .prev; reload the daemon to use the new one)");
  issue->add_option("--ca", args->ca, "CA directory made by 'geoloco certs init'")->required();
  issue->add_option("--site", args->site, "site name, as in the site and job files")->required();
  issue->add_option("--out", args->out, "directory for site.pem, site.key and ca.pem")->required();
  issue->add_option("--days", args->days, "validity in days")->capture_default_str();
  issue->callback([&action, args] {
    action = [args] {
      transport::CertOptions o;
      o.days_valid = args->days;
      const bool renewal = std::filesystem::exists(std::filesystem::path(args->out) / "site.pem");
      return report(transport::issue_site_cert(args->ca, args->site, args->out, o),
                    renewal ? "renewed the certificate of site '" + args->site + "' in " + args->out +
                                  " (the previous one is site.pem.prev); reload its daemon: systemctl reload "
                                  "geolocod, or kill -HUP"
                            : "issued certificate for site '" + args->site + "' in " + args->out);
    };
  });

  auto* revoke = certs->add_subcommand(
      "revoke",
      "Add a site certificate to the federation's revocation list (CA_DIR/crl.pem); copy it to every "
      "site's tls.crl and reload the daemons");
  revoke->add_option("--ca", args->ca, "CA directory made by 'geoloco certs init'")->required();
  revoke->add_option("--cert", args->cert, "the certificate to revoke (a site's site.pem)")->required();
  revoke->add_option("--crl-days", args->crl_days, "the list's validity in days (refresh it before then)")
      ->capture_default_str();
  revoke->callback([&action, args] {
    action = [args] {
      auto revoked = transport::revoke_cert(args->ca, args->cert, args->crl_days);
      if (!revoked.ok()) return report(revoked.status(), "");
      const std::string crl = (std::filesystem::path(args->ca) / "crl.pem").string();
      return report({}, *revoked ? "revoked " + args->cert + ": " + crl +
                                       " lists it; copy it to every site (tls.crl) and reload their daemons"
                                 : args->cert + " was revoked already; " + crl + " is unchanged");
    };
  });

  auto* crl = certs->add_subcommand(
      "crl",
      "Sign the federation's revocation list (CA_DIR/crl.pem) anew with a later next update, or make an "
      "empty one");
  crl->add_option("--ca", args->ca, "CA directory made by 'geoloco certs init'")->required();
  crl->add_option("--days", args->crl_days, "the list's validity in days")->capture_default_str();
  crl->callback([&action, args] {
    action = [args] {
      auto count = transport::refresh_crl(args->ca, args->crl_days);
      if (!count.ok()) return report(count.status(), "");
      return report({}, "wrote " + (std::filesystem::path(args->ca) / "crl.pem").string() + " (" +
                            std::to_string(*count) + " revoked, valid " + std::to_string(args->crl_days) +
                            " days); copy it to every site (tls.crl) and reload their daemons");
    };
  });
}

}  // namespace geoloco::cli
