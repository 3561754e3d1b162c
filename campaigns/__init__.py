"""Campaigns: long seeded runs that hunt for failures rather than measure (frame fuzzers, soaks,
abort and interrupt storms, hostile HTTP clients, process faults, the explorer against every
reference fault). Run one from the repository root as a module, ``python -m campaigns.NAME --help``;
each has a short seeded variant among the tests. Not part of the installed package."""
