"""The CSS of the suite's report section, with the rules that retitle or hide pytest-html's own "Environment"
block. Its own module because how the report looks changes apart from what it says."""

from report.run_section import RUN_METADATA_TITLE

#: Scoped to .suite-report, except the rules on pytest-html's own #environment block.
STYLE = """
<style>
.suite-report { max-width: 1500px; font-size: 13px; color: #222; }
.suite-report h2, .suite-report h3, .suite-report h4 { color: #111; }
.suite-report h2 { margin-top: 28px; border-bottom: 1px solid #ccc; }
.suite-report h3 { margin: 18px 0 6px; }
.suite-report h4 { margin: 10px 0 4px; }
.suite-report table.suite { border-collapse: collapse; margin: 6px 0 14px; }
.suite-report table.suite caption { text-align: left; font-weight: bold; padding: 2px 0 4px; max-width: 1400px; }
.suite-report table.suite caption:has(span.detail) { min-width: 40em; }
.suite-report table.suite caption details.notes { font-weight: normal; color: #444; }
.suite-report table.suite caption details.notes summary { cursor: pointer; }
.suite-report table.suite caption .detail { display: block; font-weight: normal; color: #444; }
.suite-report table.suite th, .suite-report table.suite td {
  border: 1px solid #ccc; padding: 3px 8px; text-align: right; vertical-align: top; }
.suite-report table.suite th { background: #f0f0f0; color: #111; }
.suite-report table.suite td.name, .suite-report table.suite th.name { text-align: left; }
.suite-report table.run th { white-space: nowrap; }
.suite-report table.suite td .unit { display: block; color: #666; font-size: 11px; }
.suite-report .warning { border: 3px solid #c00; background: #fee; padding: 8px 12px; margin: 10px 0; }
.suite-report .warning h3 { color: #c00; margin-top: 0; }
.suite-report section#suite-difference { padding: 2px 16px 8px; margin: 8px 0; border-left: 10px solid #888; }
.suite-report section#suite-difference.differs { border-color: #d08000; background: #fff7e6; }
.suite-report section#suite-difference h2 { margin-top: 4px; border: none; }
.suite-report .knob { border: 2px solid #c80; background: #ffe; padding: 6px 12px; }
.suite-report div.run-error { border: 3px solid #c00; background: #fff; padding: 2px 12px 4px; margin: 8px 0; }
.suite-report div.run-error h3 { color: #c00; margin: 6px 0 4px; }
.suite-report div.run-error pre.error { white-space: pre-wrap; font-size: 12px; background: #fee; padding: 6px; }
.suite-report div.gate-warnings { border: 2px solid #c80; background: #fffbe6; padding: 2px 12px 4px; margin: 8px 0; }
.suite-report div.gate-warnings h3 { color: #a05a00; margin: 6px 0 2px; }
.suite-report tr.regression td, .suite-report tr.drift td, .suite-report tr.over-limit td { background: #fdd; }
.suite-report table.shards td.drift { background: #fdd; }
.suite-report table.shards tr.lost td, .suite-report table.cells tr.not-judged td { background: #fff7e6; }
.suite-report table.cells tr.failed td { background: #fdd; }
.suite-report tr.improvement td { background: #dfd; }
.suite-report td.census-off { background: #fdd; }
.suite-report tr.busy td, .suite-report tr.inconclusive td, .suite-report tr.no-baseline td { background: #ffd; }
.suite-report figure.plot { margin: 8px 0 16px; }
.suite-report figure.plot img { max-width: 100%; border: 1px solid #ddd; }
.suite-report figure.plot figcaption { max-width: 1100px; color: #333; margin-top: 4px; }
.suite-report .note { color: #555; }
.suite-report section.verdict { padding: 8px 16px 12px; margin: 8px 0 16px; border-left: 10px solid #888; }
.suite-report section.verdict h2 { margin-top: 4px; border: none; }
.suite-report section.verdict .word { font-size: 26px; font-weight: bold; text-transform: uppercase; }
.suite-report section.verdict-passed { border-color: #1a7f37; background: #effaf1; }
.suite-report section.verdict-passed .word { color: #1a7f37; }
.suite-report section.verdict-failed { border-color: #c00; background: #fff0f0; }
.suite-report section.verdict-failed .word { color: #c00; }
.suite-report section.verdict-not-judged { border-color: #d08000; background: #fff7e6; }
.suite-report section.verdict-not-judged .word { color: #a05a00; }
.suite-report section.verdict-unknown .word { color: #555; }
.suite-report .accepted { color: #1a7f37; font-weight: bold; }
.suite-report .not-accepted { color: #a05a00; font-weight: bold; }
.suite-report ul.checks { margin: 2px 0 8px; }
.suite-report ul.messages { margin: 2px 0 6px; }
.suite-report details.accepted-reason > summary { cursor: pointer; margin: 8px 0 4px; }
.suite-report p.not-tested { background: #fff; border: 1px solid #d0d0d0; padding: 4px 8px; }
.suite-report p.counts-note { margin-top: -6px; font-size: 12px; }
.suite-report code { font-size: 12px; }
/* pytest-html's own "Environment" block: the suite's fingerprint is in this report; the block only
   holds what was passed with --metadata (or CI variables), and is hidden when that is nothing. */
#environment:empty, #environment-header:has(+ #environment:empty) { display: none; }
/* ... and it is not the report's environment: retitled (and moved under "The run" by RUN_METADATA's script). */
#environment-header:not(.suite-moved) h2 { font-size: 0; }
""" + f"""#environment-header:not(.suite-moved) h2::after {{ content: "{RUN_METADATA_TITLE}"; font-size: 16px; }}
""" + """.suite-report #environment-header h2 { font-size: 14px; border: none; margin: 12px 0 4px; }
.suite-report tr.flag td { background: #fff3d6; }
</style>
"""
