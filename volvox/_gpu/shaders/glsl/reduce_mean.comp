#version 430
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

struct _4
{
    uint _m0;
    uint _m1;
};

layout(binding = 0, std430) readonly buffer _11_10
{
    float _m0[];
} _10;

layout(binding = 1, std430) buffer _14_13
{
    float _m0[];
} _13;

layout(binding = 2, std430) readonly buffer _17_16
{
    _4 _m0;
} _16;

shared float _19[64];

void main()
{
    float _42 = 0.0;
    uint _47 = 32u;
    uvec2 _71 = uvec2(4294967295u);
    uvec2 _111 = uvec2(4294967295u);
    uint _53 = (gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x;
    if (_53 >= _16._m0._m0)
    {
        return;
    }
    uint _44 = gl_LocalInvocationIndex;
    for (;;)
    {
        if (all(equal(uvec2(0u), _71)))
        {
            break;
        }
        _71 -= uvec2(uint(_71.y == 0u), 1u);
        if (!(_44 < _16._m0._m1))
        {
            break;
        }
        _42 += _10._m0[(_53 * _16._m0._m1) + _44];
        _44 += 64u;
        continue;
    }
    _19[gl_LocalInvocationIndex] = _42;
    barrier();
    for (;;)
    {
        if (all(equal(uvec2(0u), _111)))
        {
            break;
        }
        _111 -= uvec2(uint(_111.y == 0u), 1u);
        if (!(_47 > 0u))
        {
            break;
        }
        if (gl_LocalInvocationIndex < _47)
        {
            _19[gl_LocalInvocationIndex] += _19[gl_LocalInvocationIndex + _47];
        }
        barrier();
        _47 = _47 >> 1u;
        continue;
    }
    if (gl_LocalInvocationIndex == 0u)
    {
        _13._m0[_53] = _19[0u] / float(_16._m0._m1);
        return;
    }
    else
    {
        return;
    }
}

