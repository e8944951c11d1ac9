"""`dsx check`: does this configuration train the same model as plain data parallel? (dsx.parity)"""

from __future__ import annotations

import sys

import click

from dsx.cli.run import request_of, run_options


@click.command("check")
@run_options
@click.option("--reference-zero", type=click.IntRange(0, 3), default=0, show_default=True,
              help="ZeRO stage of the reference (nothing offloaded): raise it when the model does not fit plain "
                   "data parallel.")
@click.option("--reference-micro-batch", type=click.IntRange(min=1), metavar="N",
              help="The reference's micro-batch (its grad-accum makes up the same batch per replica; default the "
                   "candidate's): smaller when the reference does not fit.")
def command(reference_zero, reference_micro_batch, **options):
    """Run a configuration and plain data parallel on the same data and say whether they train the same model.

    Three runs, each a row in --results: reference A (ZeRO off, nothing offloaded, no pipeline, compile,
    checkpointing or sparse attention; the same model, data, precision, optimizer and global batch), reference B
    (A in fp32 when the candidate trains in bf16/fp16, else A with the batch split the other way: the tolerance is
    made from how far A and B drift apart), then the candidate, whose row carries the verdict. Exit 0 when the
    candidate trains the same model (or differs by design: pipeline, 1-bit, sparse attention), 1 when it differs or
    a run failed, 2 when refused.

    \b
    dsx check --model gpt2-tiny --zero 3 --offload cpu --micro-batch 2 --grad-accum 4 --lr 1e-3 --precision fp32
    dsx check --model gpt2-xl --zero 2 --compile --micro-batch 16 --grad-accum 8 --set resid_pdrop=0 ...
    dsx check --model llama-7b --set num_hidden_layers=8 --zero 3 --offload cpu --act-ckpt --reference-zero 3
    """
    from dsx.parity import plan_check, run_check, table
    from dsx.run import RunRefused

    request = request_of(options, ["dsx", *sys.argv[1:]])
    try:
        plan = plan_check(request, reference_zero, reference_micro_batch)
    except RunRefused as exc:
        raise click.UsageError(str(exc)) from None
    try:
        judgement, rows = run_check(plan, say=lambda text: click.echo(text, err=True))
    except KeyboardInterrupt as exc:
        from dsx.processes import stopped_text

        click.echo(f"dsx check {plan.check_id}: interrupted; {stopped_text(exc)}", err=True)
        sys.exit(130)
    click.echo(table(judgement, rows))
    click.echo(f"rows appended to {request.results} (check {plan.check_id})")
    if judgement.verdict in ("differs", "unknown"):
        sys.exit(1)
