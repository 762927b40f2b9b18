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
  std::string name = "geoloco federation";
  int days = 825;
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

  auto* issue = certs->add_subcommand("issue", "Issue a site's key and certificate, signed by the CA");
  issue->add_option("--ca", args->ca, "CA directory made by 'geoloco certs init'")->required();
  issue->add_option("--site", args->site, "site name, as in the site and job files")->required();
  issue->add_option("--out", args->out, "directory for site.pem, site.key and ca.pem")->required();
  issue->add_option("--days", args->days, "validity in days")->capture_default_str();
  issue->callback([&action, args] {
    action = [args] {
      transport::CertOptions o;
      o.days_valid = args->days;
      return report(transport::issue_site_cert(args->ca, args->site, args->out, o),
                    "issued certificate for site '" + args->site + "' in " + args->out);
    };
  });
}

}  // namespace geoloco::cli
