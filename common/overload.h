// Overload{lambdas...}: one visitor for std::visit from several lambdas.
#pragma once

namespace geoloco {

template <class... Fs>
struct Overload : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overload(Fs...) -> Overload<Fs...>;

}  // namespace geoloco
